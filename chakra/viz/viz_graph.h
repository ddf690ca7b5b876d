// The part of an .et file a picture shows: the selected nodes (all, an id range, or the
// neighbourhood of one node), their data and ctrl dependencies inside the selection, and a
// layered layout: depth = longest dependency path from a root, order within a layer by the
// barycentre of the parents (fewer crossings than file order).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace opf::chakra {

struct VizSelection {
  std::optional<std::pair<uint64_t, uint64_t>> range;  // --range A:B, ids A..B inclusive
  std::optional<uint64_t> around;                      // --around ID
  uint32_t depth = 2;                                  // --depth K: hops from ID, either direction
};

struct VizNode {
  uint64_t id = 0;
  std::string name;
  int type = 0;  // ChakraProtoMsg::NodeType
  uint64_t duration = 0;
  std::optional<int64_t> comm_type, comm_size;
  std::vector<uint32_t> data_in, ctrl_in;  // parents, as indices into VizGraph::nodes
  uint32_t outside_deps = 0;               // deps on nodes outside the view (or missing)
  uint32_t depth = 0, order = 0;           // layer and position in it
};

struct VizGraph {
  std::string source;     // the .et path
  std::string selection;  // "all nodes", "ids 10..20", "within 2 of node 7"
  std::vector<VizNode> nodes;
  std::vector<uint32_t> layer_size;  // nodes per depth
  size_t file_nodes = 0;
  size_t missing_deps = 0;   // deps on ids not in the file
  size_t duplicate_ids = 0;  // later nodes with an id already seen (edges go to the first)
  size_t cyclic = 0;         // nodes on or behind a cycle, put in one last layer
};

// Throws InputError: unreadable .et, ID not in the file, an empty selection.
VizGraph load_viz_graph(const std::string& path, const VizSelection& sel);

}  // namespace opf::chakra
