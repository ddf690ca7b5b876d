#include "et_load.h"

#include "et_stream.h"
#include "input_error.h"

namespace opf::chakra {

void load_et(const std::string& path, bool compat, LoadedEt& out) {
  EtReader rd(path, compat);
  if (!rd.next(out.meta)) throw InputError(path, "byte 0", "empty .et stream (no GlobalMetadata record)");
  ChakraProtoMsg::Node n;
  using A = ChakraProtoMsg::AttributeProto;
  while (rd.next(n)) {
    EtNode g;
    g.id = n.id();
    g.name = out.pool.add(n.name());
    g.data_deps.assign(n.data_deps().begin(), n.data_deps().end());
    g.ctrl_deps.assign(n.ctrl_deps().begin(), n.ctrl_deps().end());
    g.duration = n.duration_micros();
    g.type = int(n.type());
    g.has_stream = false;
    for (const auto& a : n.attr()) {
      if (a.name() == "is_cpu_op" && a.value_case() == A::kBoolVal) g.is_cpu = a.bool_val();
      if (a.name() == "stream" && a.value_case() == A::kInt64Val) g.has_stream = true, g.stream = a.int64_val();
      if (a.name() == "tid" && a.value_case() == A::kInt64Val) g.has_tid = true, g.tid = a.int64_val();
    }
    if (!ChakraProtoMsg::NodeType_IsValid(n.type()))
      out.type_problems.push_back("node " + std::to_string(n.id()) + ": unknown node type " + std::to_string(n.type()));
    out.nodes.push_back(std::move(g));
  }
}

}  // namespace opf::chakra
