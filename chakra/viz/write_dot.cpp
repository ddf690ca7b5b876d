#include "viz_style.h"
#include "viz_writers.h"

namespace opf::chakra::viz {

namespace {

// A DOT double-quoted string: '"' and '\' escaped (backslash sequences mean things in labels),
// line breaks as \n, other control characters dropped.
std::string quoted(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\', o += c;
    else if (c == '\n') o += "\\n";
    else if (uint8_t(c) >= 0x20 && c != 0x7f) o += c;
  }
  return o + "\"";
}

}  // namespace

std::string to_dot(const VizGraph& g) {
  std::string o = "digraph chakra {\n";
  o += "  graph [rankdir=TB, fontname=\"Helvetica\", labelloc=t, label=" +
       quoted(g.source + " (" + std::to_string(g.nodes.size()) + " nodes, " + g.selection + ")") + "];\n";
  o += "  node [shape=box, style=\"filled,rounded\", fontname=\"Helvetica\", fontsize=10];\n";
  o += "  edge [arrowsize=0.6];\n";
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const VizNode& n = g.nodes[i];
    o += "  n" + std::to_string(i) + " [label=" +
         quoted(short_name(n.name, 40) + "\n#" + std::to_string(n.id) + "  " + std::to_string(n.duration) + " us") +
         ", fillcolor=\"" + type_color(n.type) + "\", tooltip=" + quoted(tooltip(n)) + "];\n";
  }
  // data deps solid, ctrl deps dashed
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (uint32_t p : g.nodes[i].data_in) o += "  n" + std::to_string(p) + " -> n" + std::to_string(i) + ";\n";
    for (uint32_t p : g.nodes[i].ctrl_in)
      o += "  n" + std::to_string(p) + " -> n" + std::to_string(i) + " [style=dashed, color=\"#777777\"];\n";
  }
  return o + "}\n";
}

}  // namespace opf::chakra::viz
