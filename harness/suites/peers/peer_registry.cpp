#include "peer.h"

namespace opf::suites::peers {
namespace {
std::vector<Adapter>& table() {
  static std::vector<Adapter> t;
  return t;
}
}  // namespace

const std::vector<Adapter>& adapters() { return table(); }

const Adapter* find_adapter(std::string_view lib, std::string_view op) {
  for (const Adapter& a : table())
    if (a.lib == lib && a.op == op) return &a;
  return nullptr;
}

Registration::Registration(Adapter a) { table().push_back(std::move(a)); }

}  // namespace opf::suites::peers
