// Helpers for the visualize tests: .et inputs (generated, or written node by node for the odd
// cases), reading an .et back independently of the visualizer, and the nodes of an HTML view.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <string>
#include <vector>

#include "../../tests/test_util.h"
#include "et_generator.h"
#include "et_stream.h"
#include "proto/et_def.pb.h"
#include "visualize.h"

namespace opf::chakra::test {

inline std::string generated(const TempDir& td, const std::string& kind, uint64_t nodes, uint64_t seed = 1) {
  GenerateOptions o;
  o.kind = kind;
  o.nodes = nodes;
  o.seed = seed;
  std::string prefix = td.file(kind + std::to_string(nodes));
  generate(o, prefix);
  return prefix + ".0.et";
}

inline void write_et(const std::string& path, const std::vector<ChakraProtoMsg::Node>& nodes) {
  std::string bytes;
  EtWriter w(bytes);
  ChakraProtoMsg::GlobalMetadata gm;
  gm.set_version("0.0.4");
  w.write(gm);
  for (const auto& n : nodes) w.write(n);
  write_file(path, bytes);
}

inline ChakraProtoMsg::Node node(uint64_t id, const std::string& name, std::vector<uint64_t> data = {},
                                 std::vector<uint64_t> ctrl = {}, int type = ChakraProtoMsg::COMP_NODE) {
  ChakraProtoMsg::Node n;
  n.set_id(id);
  n.set_name(name);
  n.set_type(ChakraProtoMsg::NodeType(type));
  n.set_duration_micros(id * 10);
  for (uint64_t d : data) n.add_data_deps(d);
  for (uint64_t d : ctrl) n.add_ctrl_deps(d);
  return n;
}

// Names that need escaping in every format: quotes, markup, backslashes, line breaks, control
// characters XML forbids, U+FFFE, non-ASCII.
inline std::vector<ChakraProtoMsg::Node> awkward_nodes() {
  return {node(0, "say \"hi\" <b>&amp;</b>"), node(1, "back\\slash\\n and \\\"", {0}),
          node(2, "two\nlines\r\tand\x01\x1f bell\x07", {1}, {0}),
          node(3, "caf\xc3\xa9 \xef\xbf\xbe \xe2\x82\xac 'q'", {2}),
          node(4, "]]> --> <!-- &#0;", {3}, {}, ChakraProtoMsg::COMM_COLL_NODE)};
}

inline std::vector<ChakraProtoMsg::Node> read_et(const std::string& path) {
  EtReader r(path, false);
  ChakraProtoMsg::GlobalMetadata m;
  EXPECT_TRUE(r.next(m));
  std::vector<ChakraProtoMsg::Node> out;
  ChakraProtoMsg::Node n;
  while (r.next(n)) out.push_back(n);
  return out;
}

struct HtmlNode {
  int depth = 0, x = 0, y = 0;
  std::string fill, title;
};

// id -> what the HTML view drew for it
inline std::map<uint64_t, HtmlNode> html_nodes(const std::string& html) {
  static const std::regex g(
      "<g class=\"n\" data-id=\"(\\d+)\" data-depth=\"(\\d+)\"><title>([^<]*)</title><rect x=\"(-?\\d+)\" "
      "y=\"(-?\\d+)\"[^>]* fill=\"([^\"]+)\"");
  std::map<uint64_t, HtmlNode> out;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), g); it != std::sregex_iterator(); ++it) {
    HtmlNode h;
    h.depth = std::stoi((*it)[2]);
    h.title = (*it)[3];
    h.x = std::stoi((*it)[4]);
    h.y = std::stoi((*it)[5]);
    h.fill = (*it)[6];
    out[std::stoull((*it)[1])] = h;
  }
  return out;
}

inline size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

}  // namespace opf::chakra::test
