// The dependency view of a Chakra graph that the validator and the simulator work on, whether
// it comes from the converter (before writing) or from an .et file. Nodes are kept in "map
// order" (the converter's insertion order, or file order for .et input): the reference's cycle
// check and simulation iterate in that order.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace opf::chakra {

struct EtNode {
  uint64_t id = 0;
  std::string_view name;
  std::vector<uint64_t> data_deps, ctrl_deps;
  uint64_t duration = 0;
  bool is_cpu = true;       // simulator: CPU (one shared core) vs GPU (per-stream queue)
  bool has_stream = false;  // false: "stream" is None
  int64_t stream = 0;
  bool has_tid = false;
  int64_t tid = 0;
  int type = 0;  // ChakraProtoMsg::NodeType (.et input; the converter leaves 0)
};

}  // namespace opf::chakra
