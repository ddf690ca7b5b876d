// The GraphML and HTML views are well-formed XML (the HTML is written in XHTML syntax), checked
// by libxml2's parser on generated graphs, a text-workload graph and awkward names; GraphML
// also against its own structure (one <node> per node, one <edge> per dependency). Exits 77
// (skipped) when built without libxml2.
#include <cstdio>

#ifndef OPF_HAVE_LIBXML2
int main() {
  std::printf(
      "SKIP: libxml2 development files (pkg-config libxml-2.0; Debian: libxml2-dev) were not found when "
      "configuring, so the XML well-formedness check is not built\n");
  return 77;
}
#else
#include <gtest/gtest.h>
#include <libxml/parser.h>
#include <libxml/tree.h>

#include "viz_test_util.h"

namespace opf::chakra {
namespace {

using test::TempDir;

std::string parse_error;

void collect(void*, xmlErrorPtr e) {
  if (e && parse_error.empty()) parse_error = std::to_string(e->line) + ": " + (e->message ? e->message : "?");
}

// Parses strictly (no recovery, no network); returns the document or null with parse_error set.
xmlDocPtr parse(const std::string& text) {
  parse_error.clear();
  xmlSetStructuredErrorFunc(nullptr, collect);
  return xmlReadMemory(text.data(), int(text.size()), "view.xml", "UTF-8", XML_PARSE_NONET);
}

size_t count_elements(xmlNodePtr n, const char* name) {
  size_t c = 0;
  for (; n; n = n->next) {
    if (n->type == XML_ELEMENT_NODE && xmlStrcmp(n->name, BAD_CAST name) == 0) ++c;
    c += count_elements(n->children, name);
  }
  return c;
}

std::vector<std::string> inputs(const TempDir& td) {
  std::vector<std::string> in = {test::generated(td, "dag", 500), test::generated(td, "all-types", 30),
                                 test::generated(td, "collectives", 64)};
  test::write_et(td.file("awkward.et"), test::awkward_nodes());
  in.push_back(td.file("awkward.et"));
  return in;
}

TEST(Xml, GraphmlIsWellFormedWithOneElementPerNodeAndDependency) {
  TempDir td;
  for (const auto& in : inputs(td)) {
    visualize(in, td.file("v.graphml"), {});
    xmlDocPtr doc = parse(test::read_file(td.file("v.graphml")));
    ASSERT_TRUE(doc) << in << ": " << parse_error;
    xmlNodePtr root = xmlDocGetRootElement(doc);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(root->name)), "graphml");
    size_t deps = 0;
    auto nodes = test::read_et(in);
    for (const auto& n : nodes) deps += n.data_deps_size() + n.ctrl_deps_size();
    EXPECT_EQ(count_elements(root, "node"), nodes.size()) << in;
    EXPECT_EQ(count_elements(root, "edge"), deps) << in;
    xmlFreeDoc(doc);
  }
}

TEST(Xml, HtmlIsWellFormedXhtmlWithAnSvgNodePerNode) {
  TempDir td;
  for (const auto& in : inputs(td)) {
    visualize(in, td.file("v.html"), {});
    xmlDocPtr doc = parse(test::read_file(td.file("v.html")));
    ASSERT_TRUE(doc) << in << ": " << parse_error;
    xmlNodePtr root = xmlDocGetRootElement(doc);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(root->name)), "html");
    EXPECT_EQ(count_elements(root, "svg"), 1u);
    EXPECT_EQ(count_elements(root, "rect"), test::read_et(in).size()) << in;
    xmlFreeDoc(doc);
  }
}

// The parser must be able to fail, or the two tests above prove nothing.
TEST(Xml, TheCheckRejectsMalformedText) {
  for (const char* bad : {"<a><b></a>", "<a>&nope;</a>", "<a>\x01</a>", "<a x=\"1\" x=\"2\"/>"}) {
    xmlDocPtr doc = parse(bad);
    EXPECT_FALSE(doc) << bad;
    if (doc) xmlFreeDoc(doc);
  }
}

}  // namespace
}  // namespace opf::chakra
#endif
