#include "viz_style.h"
#include "viz_writers.h"

namespace opf::chakra::viz {

std::string to_graphml(const VizGraph& g) {
  std::string o = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o += "<graphml xmlns=\"http://graphml.graphdrawing.org/xmlns\" "
       "xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" "
       "xsi:schemaLocation=\"http://graphml.graphdrawing.org/xmlns "
       "http://graphml.graphdrawing.org/xmlns/1.0/graphml.xsd\">\n";
  struct Key {
    const char* id;
    const char* for_;
    const char* type;
  } keys[] = {{"name", "node", "string"},    {"chakra_id", "node", "string"},
              {"type", "node", "string"},    {"duration_micros", "node", "long"},
              {"comm_type", "node", "long"}, {"comm_size", "node", "long"},
              {"depth", "node", "int"},      {"color", "node", "string"},
              {"dep", "edge", "string"}};
  // chakra_id is a string: ids are uint64 and GraphML's long is signed
  for (const auto& k : keys)
    o.append("  <key id=\"")
        .append(k.id)
        .append("\" for=\"")
        .append(k.for_)
        .append("\" attr.name=\"")
        .append(k.id)
        .append("\" attr.type=\"")
        .append(k.type)
        .append("\"/>\n");
  o += "  <graph id=\"" + xml_text(g.source) + "\" edgedefault=\"directed\">\n";
  auto data = [&](const char* key, const std::string& v) {
    o.append("      <data key=\"").append(key).append("\">").append(v).append("</data>\n");
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const VizNode& n = g.nodes[i];
    o += "    <node id=\"n" + std::to_string(i) + "\">\n";
    data("name", xml_text(n.name));
    data("chakra_id", std::to_string(n.id));
    data("type", type_name(n.type));
    data("duration_micros", std::to_string(n.duration));
    if (n.comm_type) data("comm_type", std::to_string(*n.comm_type));
    if (n.comm_size) data("comm_size", std::to_string(*n.comm_size));
    data("depth", std::to_string(n.depth));
    data("color", type_color(n.type));
    o += "    </node>\n";
  }
  size_t e = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    auto edge = [&](uint32_t p, const char* kind) {
      o += "    <edge id=\"e" + std::to_string(e++) + "\" source=\"n" + std::to_string(p) + "\" target=\"n" +
           std::to_string(i) + "\"><data key=\"dep\">" + kind + "</data></edge>\n";
    };
    for (uint32_t p : g.nodes[i].data_in) edge(p, "data");
    for (uint32_t p : g.nodes[i].ctrl_in) edge(p, "ctrl");
  }
  return o + "  </graph>\n</graphml>\n";
}

}  // namespace opf::chakra::viz
