// `opforge chakra visualize IN.et -o OUT.dot|OUT.graphml|OUT.html [--range A:B | --around ID
// --depth K]`: the format follows OUT's extension. The output appears only complete (temp file
// + rename) and replaces an existing file, as `chakra convert` does.
#pragma once

#include <string>

#include "viz_graph.h"

namespace opf::chakra {

// The HTML view lays out every node it is given; beyond this many it asks for a cut instead.
constexpr size_t kHtmlMaxNodes = 10000;

struct VisualizeStats {
  size_t nodes = 0, edges = 0;
  size_t missing_deps = 0, duplicate_ids = 0, cyclic = 0;  // drawn anyway; worth a warning
};

// Throws InputError: unknown extension, unreadable input, empty selection, an HTML view too big.
VisualizeStats visualize(const std::string& in, const std::string& out, const VizSelection& sel);

// "A:B", "A:" or ":B" (ids, inclusive); throws InputError naming --range.
std::pair<uint64_t, uint64_t> parse_id_range(const std::string& text);

}  // namespace opf::chakra
