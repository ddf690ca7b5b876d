#include "cli_filters.h"

#include <algorithm>
#include <vector>

#include "opforge/error.h"
#include "opforge/manifest.h"

namespace opf::suites {
namespace {

void check(const std::string& kind, const std::string& value, std::vector<std::string> known) {
  if (value.empty() || std::find(known.begin(), known.end(), value) != known.end()) return;
  std::sort(known.begin(), known.end());
  known.erase(std::unique(known.begin(), known.end()), known.end());
  std::string list;
  for (const std::string& k : known) {
    if (!list.empty()) list += ", ";
    list += k;
  }
  throw Error("unknown " + kind + " '" + value + "' (this build has: " + (list.empty() ? "none" : list) + ")");
}

}  // namespace

void CaseFilter::validate() const {
  std::vector<std::string> ops, backends, dtypes;
  for (const OpInfo& o : op_table()) {
    ops.push_back(o.name);
    if (!op.empty() && o.name != op) continue;
    backends.insert(backends.end(), o.enabled_backends.begin(), o.enabled_backends.end());
    dtypes.insert(dtypes.end(), o.dtypes.begin(), o.dtypes.end());
  }
  check("op", op, ops);
  check("backend", backend, backends);
  check("dtype", dtype, dtypes);
}

std::string CaseFilter::gtest_filter() const {
  auto any = [](const std::string& s) { return s.empty() ? std::string("*") : s; };
  std::string f = "kernel." + any(op) + "/" + any(backend) + "/" + any(dtype) + "/*";
  f += ":threads." + any(op) + "/" + any(backend) + "/" + any(dtype) + "/*";  // thread-count determinism
  if (backend.empty()) f += ":peer.*/" + any(op) + "/" + any(dtype) + "/*";   // peer adapter checks
  return f;
}

std::string CaseFilter::benchmark_regex() const {
  auto any = [](const std::string& s) { return s.empty() ? std::string("[^/]+") : s; };
  return "^probe/|^" + any(op) + "/" + any(backend) + "/" + any(dtype) + "/|^peer/[^/]+/" + any(op) + "/" + any(dtype) +
         "/";
}

}  // namespace opf::suites
