// A self-contained page (no script, no external file): an SVG with one band of rows per
// dependency depth, nodes coloured by type with their name and duration in a native tooltip
// (<title>), data deps solid and ctrl deps dashed. Written as well-formed XML (XHTML syntax), so
// XML tools can check it as well as browsers can show it.
#include <algorithm>

#include "proto/et_def.pb.h"
#include "viz_style.h"
#include "viz_writers.h"

namespace opf::chakra::viz {

namespace {

constexpr int kBoxW = 150, kBoxH = 34, kGapX = 14, kRowGap = 56, kMargin = 20, kHeader = 40;
// Layers wider than this wrap into several rows, so a fan of thousands stays viewable.
constexpr uint32_t kPerRow = 64;

struct Pos {
  int x, y;
};

std::string num(int v) { return std::to_string(v); }

}  // namespace

std::string to_html(const VizGraph& g) {
  // rows: each depth takes ceil(size / kPerRow) rows; x centred on the widest row
  const uint32_t layers = uint32_t(g.layer_size.size());
  std::vector<int> first_row(layers + 1, 0);
  uint32_t widest = 1;
  for (uint32_t d = 0; d < layers; ++d) {
    const uint32_t rows = std::max<uint32_t>(1, (g.layer_size[d] + kPerRow - 1) / kPerRow);
    first_row[d + 1] = first_row[d] + int(rows);
    widest = std::max(widest, std::min(g.layer_size[d], kPerRow));
  }
  const int width = 2 * kMargin + int(widest) * (kBoxW + kGapX) - kGapX;
  const int height = kHeader + 2 * kMargin + first_row[layers] * (kBoxH + kRowGap) - kRowGap;
  std::vector<Pos> pos(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const VizNode& n = g.nodes[i];
    const uint32_t row = n.order / kPerRow, col = n.order % kPerRow;
    const uint32_t in_row = std::min(kPerRow, g.layer_size[n.depth] - row * kPerRow);
    const int row_width = int(in_row) * (kBoxW + kGapX) - kGapX;
    pos[i] = {(width - row_width) / 2 + int(col) * (kBoxW + kGapX),
              kHeader + kMargin + (first_row[n.depth] + int(row)) * (kBoxH + kRowGap)};
  }

  std::string o;
  o.reserve(g.nodes.size() * 600 + 4096);
  const std::string title =
      xml_text(g.source) + " (" + std::to_string(g.nodes.size()) + " nodes, " + xml_text(g.selection) + ")";
  o +=
      "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n";
  o += "<title>" + title +
       "</title>\n<style>\n"
       "body { font-family: Helvetica, Arial, sans-serif; margin: 0; }\n"
       "header { padding: 8px 16px; border-bottom: 1px solid #ccc; font-size: 14px; }\n"
       ".legend span { display: inline-block; margin-right: 14px; }\n"
       ".legend i { display: inline-block; width: 12px; height: 12px; border: 1px solid #555; margin-right: 4px; "
       "vertical-align: middle; }\n"
       ".view { overflow: auto; }\n"
       "svg { display: block; }\n"
       "</style>\n</head>\n<body>\n<header>\n<div><b>" +
       title + "</b>";
  if (g.cyclic) o += " &#8212; " + std::to_string(g.cyclic) + " nodes on dependency cycles (last layer)";
  o += "</div>\n<div class=\"legend\">";
  std::vector<int> present;
  for (const auto& n : g.nodes)
    if (std::find(present.begin(), present.end(), n.type) == present.end()) present.push_back(n.type);
  std::sort(present.begin(), present.end());
  for (int t : present)
    o += "<span><i style=\"background: " + std::string(type_color(t)) + "\"></i>" + type_name(t) + "</span>";
  o += "<span>&#8212; data dependency</span><span>- - - control dependency</span><span>hover a node for its name and "
       "duration</span></div>\n</header>\n";
  o += "<div class=\"view\">\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" +
       num(height) + "\" viewBox=\"0 0 " + num(width) + " " + num(height) + "\">\n";
  // the drawing's own style travels with the SVG, so it also renders when cut out of the page
  o += "<style>\n"
       ".n rect { stroke: #444; stroke-width: 1; }\n"
       ".n:hover rect { stroke: #000; stroke-width: 3; }\n"
       ".n text { font-family: Helvetica, Arial, sans-serif; font-size: 10px; pointer-events: none; }\n"
       ".d { stroke: #555; fill: none; }\n"
       ".c { stroke: #999; fill: none; stroke-dasharray: 5 4; }\n"
       "</style>\n";
  o += "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"6\" markerHeight=\"6\" "
       "orient=\"auto-start-reverse\"><path d=\"M 0 0 L 10 5 L 0 10 z\" fill=\"#555\"/></marker></defs>\n";
  // edges under the nodes
  o += "<g class=\"edges\">\n";
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    auto edge = [&](uint32_t p, const char* cls) {
      const int x1 = pos[p].x + kBoxW / 2, y1 = pos[p].y + kBoxH, x2 = pos[i].x + kBoxW / 2, y2 = pos[i].y;
      const int mid = (y2 - y1) / 2;
      o += "<path class=\"" + std::string(cls) + "\" d=\"M" + num(x1) + " " + num(y1) + " C" + num(x1) + " " +
           num(y1 + mid) + " " + num(x2) + " " + num(y2 - mid) + " " + num(x2) + " " + num(y2) +
           "\" marker-end=\"url(#arrow)\"/>\n";
    };
    for (uint32_t p : g.nodes[i].data_in) edge(p, "d");
    for (uint32_t p : g.nodes[i].ctrl_in) edge(p, "c");
  }
  o += "</g>\n<g class=\"nodes\">\n";
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const VizNode& n = g.nodes[i];
    const int x = pos[i].x, y = pos[i].y;
    o += "<g class=\"n\" data-id=\"" + std::to_string(n.id) + "\" data-depth=\"" + std::to_string(n.depth) +
         "\"><title>" + xml_text(tooltip(n)) + "</title>";
    o += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(kBoxW) + "\" height=\"" + num(kBoxH) +
         "\" rx=\"5\" fill=\"" + type_color(n.type) + "\"/>";
    o += "<text x=\"" + num(x + 6) + "\" y=\"" + num(y + 14) + "\">" + xml_text(short_name(n.name, 24)) + "</text>";
    o += "<text x=\"" + num(x + 6) + "\" y=\"" + num(y + 27) + "\">#" + std::to_string(n.id) + " \xc2\xb7 " +
         std::to_string(n.duration) + " us</text></g>\n";
  }
  o += "</g>\n</svg>\n</div>\n</body>\n</html>\n";
  return o;
}

}  // namespace opf::chakra::viz
