#include "validator.h"

#include <unordered_map>

#include "id_index.h"

namespace opf::chakra {

namespace {
std::string label(const EtNode& n) { return "node " + std::to_string(n.id) + " (" + std::string(n.name) + ")"; }
}  // namespace

std::vector<Issue> validate_graph(const std::vector<EtNode>& nodes, const ValidateOptions& opt) {
  std::vector<Issue> issues;
  IdIndex pos;
  {
    size_t dup = 0, first = 0;
    if (!pos.build(
            nodes.size(), [&](size_t i) { return nodes[i].id; }, &dup, &first))
      issues.push_back(
          {true, label(nodes[dup]),
           "duplicate node id " + std::to_string(nodes[dup].id) + " (also used by " + label(nodes[first]) + ")"});
  }
  for (const auto& n : nodes) {
    for (uint64_t d : n.data_deps)
      if (pos.find(d) == IdIndex::kNone)
        issues.push_back({true, label(n), "data dependency on missing node " + std::to_string(d)});
    for (uint64_t d : n.ctrl_deps)
      if (pos.find(d) == IdIndex::kNone)
        issues.push_back(
            {opt.ctrl_dangling_is_error, label(n), "control dependency on missing node " + std::to_string(d)});
  }
  // cycles over data_deps (node -> dep), iterative DFS in map order
  enum : uint8_t { kWhite, kGray, kBlack };
  std::vector<uint8_t> color(nodes.size(), kWhite);
  std::vector<uint32_t> stack_pos(nodes.size(), 0);
  struct Frame {
    uint32_t node;
    uint32_t next;
  };
  std::vector<Frame> stack;
  for (uint32_t root = 0; root < nodes.size(); ++root) {
    if (color[root] != kWhite) continue;
    stack.push_back({root, 0});
    color[root] = kGray;
    stack_pos[root] = 0;
    while (!stack.empty()) {
      Frame& f = stack.back();
      const auto& deps = nodes[f.node].data_deps;
      if (f.next < deps.size()) {
        uint32_t d = pos.find(deps[f.next++]);
        if (d == IdIndex::kNone) continue;
        if (color[d] == kGray) {
          // the cycle is the stack from d to the top, closed by d
          std::string cyc;
          for (size_t k = stack_pos[d]; k < stack.size(); ++k) cyc += label(nodes[stack[k].node]).substr(5) + " -> ";
          cyc += label(nodes[d]).substr(5);
          issues.push_back({true, label(nodes[d]), "dependency cycle: " + cyc});
          // one report per cycle entry point is enough; keep walking to find others
        } else if (color[d] == kWhite) {
          color[d] = kGray;
          stack_pos[d] = uint32_t(stack.size());
          stack.push_back({d, 0});
        }
      } else {
        color[f.node] = kBlack;
        stack.pop_back();
      }
    }
  }
  return issues;
}

std::vector<Issue> validate_metadata(const ChakraProtoMsg::GlobalMetadata& meta) {
  std::vector<Issue> issues;
  using A = ChakraProtoMsg::AttributeProto;
  struct Want {
    const char* name;
    A::ValueCase kind;
    bool seen = false;
  } want[] = {{"schema", A::kStringVal},
              {"pid", A::kUint64Val},
              {"time", A::kStringVal},
              {"start_ts", A::kUint64Val},
              {"finish_ts", A::kUint64Val}};
  uint64_t start = 0, finish = 0;
  bool has_start = false, has_finish = false;
  for (const auto& a : meta.attr()) {
    for (auto& w : want) {
      if (a.name() != w.name) continue;
      if (w.seen) issues.push_back({true, "GlobalMetadata", std::string("attribute '") + w.name + "' appears twice"});
      w.seen = true;
      if (a.value_case() != w.kind)
        issues.push_back(
            {false, "GlobalMetadata", std::string("attribute '") + w.name + "' has an unexpected value kind"});
    }
    if (a.name() == "start_ts" && a.value_case() == A::kUint64Val) start = a.uint64_val(), has_start = true;
    if (a.name() == "finish_ts" && a.value_case() == A::kUint64Val) finish = a.uint64_val(), has_finish = true;
  }
  // The text-workload converters (reference TextConverter, from-text) write schema and
  // input_file only: there is no host trace, so no pid or timestamps to expect.
  bool text_style = false;
  for (const auto& a : meta.attr()) text_style = text_style || a.name() == "input_file";
  bool converter_style = want[0].seen && !text_style;
  if (converter_style)
    for (const auto& w : want)
      if (!w.seen) issues.push_back({false, "GlobalMetadata", std::string("attribute '") + w.name + "' is missing"});
  if (!converter_style && meta.version().empty() && meta.attr_size() == 0)
    issues.push_back({false, "GlobalMetadata", "empty (no version, no schema)"});
  if (has_start && has_finish && finish < start)
    issues.push_back({true, "GlobalMetadata",
                      "finish_ts " + std::to_string(finish) + " is before start_ts " + std::to_string(start)});
  return issues;
}

}  // namespace opf::chakra
