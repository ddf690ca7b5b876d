// The output formats of `opforge chakra visualize`, each the whole file as text.
#pragma once

#include <string>

#include "viz_graph.h"

namespace opf::chakra::viz {

std::string to_dot(const VizGraph& g);      // Graphviz; `dot` does the layout
std::string to_graphml(const VizGraph& g);  // GraphML for networkx, yEd, Gephi
std::string to_html(const VizGraph& g);     // self-contained page, SVG laid out by depth

// Text for XML content and attribute values: markup escaped, and the characters XML 1.0
// forbids (C0 controls but tab/newline, U+FFFE, U+FFFF) replaced by U+FFFD.
std::string xml_text(const std::string& s);

}  // namespace opf::chakra::viz
