// Structural checks of a Chakra graph: duplicate ids, dependencies on ids that are not nodes,
// cycles (reported as the cycle itself: ids and names), plus GlobalMetadata sanity for .et
// files. Iterative (no recursion), O(nodes + edges). The converter runs it before writing.
#pragma once

#include <string>
#include <vector>

#include "et_graph.h"
#include "proto/et_def.pb.h"

namespace opf::chakra {

struct Issue {
  bool error = true;
  std::string where;  // "node 12 (aten::mm)" / "GlobalMetadata" / ...
  std::string problem;
};

struct ValidateOptions {
  // The reference converter writes thread roots with ctrl_deps=[0] after removing node 0, so a
  // ctrl dep to a missing node is only a warning unless asked otherwise.
  bool ctrl_dangling_is_error = false;
};

std::vector<Issue> validate_graph(const std::vector<EtNode>& nodes, const ValidateOptions& opt = {});
std::vector<Issue> validate_metadata(const ChakraProtoMsg::GlobalMetadata& meta);

}  // namespace opf::chakra
