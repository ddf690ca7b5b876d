// visualize: what each format shows (every selected node once, data deps solid, ctrl deps
// dashed, colour by type, name and duration on hover, layers by dependency depth), the two cuts
// (--range, --around/--depth), and bad input. The .et inputs are read back independently to
// know what must be drawn. Graphviz and XML parsers check the files in the other two tests.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <set>

#include "input_error.h"
#include "viz_test_util.h"

namespace opf::chakra {
namespace {

using test::TempDir;

TEST(Dot, EveryNodeOnceDataSolidCtrlDashed) {
  TempDir td;
  std::string in = test::generated(td, "dag", 400);
  size_t data = 0, ctrl = 0;
  auto nodes = test::read_et(in);
  for (const auto& n : nodes) data += n.data_deps_size(), ctrl += n.ctrl_deps_size();
  ASSERT_GT(ctrl, 0u);
  auto st = visualize(in, td.file("g.dot"), {});
  EXPECT_EQ(st.nodes, nodes.size());
  EXPECT_EQ(st.edges, data + ctrl);
  std::string dot = test::read_file(td.file("g.dot"));
  EXPECT_EQ(dot.rfind("digraph chakra {", 0), 0u);
  EXPECT_EQ(test::count(dot, " -> "), data + ctrl);
  EXPECT_EQ(test::count(dot, "[style=dashed"), ctrl);
  for (const auto& n : nodes)
    EXPECT_NE(dot.find("label=\"" + n.name() + "\\n#" + std::to_string(n.id()) + " "), std::string::npos) << n.name();
}

TEST(Html, LayersFollowDependencyDepthAndEveryNodeHasItsTooltip) {
  TempDir td;
  for (const char* kind : {"dag", "all-types", "fan", "collectives"}) {
    std::string in = test::generated(td, kind, 120);
    visualize(in, td.file("v.html"), {});
    std::string html = test::read_file(td.file("v.html"));
    auto drawn = test::html_nodes(html);
    auto nodes = test::read_et(in);
    ASSERT_EQ(drawn.size(), nodes.size()) << kind;
    size_t data = 0, ctrl = 0;
    for (const auto& n : nodes) {
      const auto& h = drawn.at(n.id());
      // hover: the whole name and the duration
      EXPECT_EQ(h.title.rfind(n.name() + "&#10;id " + std::to_string(n.id()) + ", ", 0), 0u) << h.title;
      EXPECT_NE(h.title.find(", " + std::to_string(n.duration_micros()) + " us"), std::string::npos) << h.title;
      // every dependency points down: a deeper layer, lower on the page
      int depth = 0;
      for (const auto* deps : {&n.data_deps(), &n.ctrl_deps()})
        for (uint64_t d : *deps) {
          EXPECT_LT(drawn.at(d).depth, h.depth) << kind << ": " << d << " -> " << n.id();
          EXPECT_LT(drawn.at(d).y, h.y) << kind;
          depth = std::max(depth, drawn.at(d).depth + 1);
        }
      EXPECT_EQ(h.depth, depth) << kind << ": node " << n.id() << " is not at its longest-path depth";
      data += n.data_deps_size(), ctrl += n.ctrl_deps_size();
    }
    EXPECT_EQ(test::count(html, "<path class=\"d\""), data) << kind;
    EXPECT_EQ(test::count(html, "<path class=\"c\""), ctrl) << kind;
    EXPECT_NE(html.find(".c { stroke: #999; fill: none; stroke-dasharray: 5 4; }"), std::string::npos);
    EXPECT_EQ(html.find("<script"), std::string::npos) << "self-contained, no script";
    EXPECT_EQ(html.find(" src="), std::string::npos) << "self-contained, nothing loaded";
  }
}

TEST(Html, OneColourPerNodeType) {
  TempDir td;
  std::string in = test::generated(td, "all-types", 14);
  visualize(in, td.file("v.html"), {});
  auto drawn = test::html_nodes(test::read_file(td.file("v.html")));
  std::map<int, std::string> colour_of_type;
  std::set<std::string> colours;
  for (const auto& n : test::read_et(in)) {
    auto [it, fresh] = colour_of_type.emplace(n.type(), drawn.at(n.id()).fill);
    EXPECT_EQ(it->second, drawn.at(n.id()).fill) << "type " << n.type();
    if (fresh) colours.insert(it->second);
  }
  EXPECT_EQ(colour_of_type.size(), 7u);
  EXPECT_EQ(colours.size(), 7u) << "two node types share a colour";
}

TEST(Html, WideLayersWrapIntoRowsOfTheSameBand) {
  TempDir td;
  std::string in = test::generated(td, "fan", 1002);  // 1000 nodes in layer 1
  visualize(in, td.file("v.html"), {});
  auto drawn = test::html_nodes(test::read_file(td.file("v.html")));
  std::set<int> rows, xs;
  for (const auto& [id, h] : drawn)
    if (h.depth == 1) rows.insert(h.y), xs.insert(h.x);
  EXPECT_EQ(rows.size(), 16u);  // 64 per row
  EXPECT_EQ(xs.size(), 64u);
  EXPECT_GT(drawn.at(1001).y, *rows.rbegin()) << "the sink is below every row of its parents";
}

TEST(Selection, RangeKeepsThoseIdsAndTheirEdgesAmongThem) {
  TempDir td;
  std::string in = test::generated(td, "dag", 200, 3);
  auto st = visualize(in, td.file("r.html"), VizSelection{std::make_pair(uint64_t(50), uint64_t(80)), std::nullopt, 2});
  auto drawn = test::html_nodes(test::read_file(td.file("r.html")));
  EXPECT_EQ(drawn.size(), 31u);
  EXPECT_EQ(drawn.begin()->first, 50u);
  EXPECT_EQ(drawn.rbegin()->first, 80u);
  size_t inside = 0;
  for (const auto& n : test::read_et(in)) {
    if (n.id() < 50 || n.id() > 80) continue;
    size_t outside = 0;
    for (const auto* deps : {&n.data_deps(), &n.ctrl_deps()})
      for (uint64_t d : *deps) (d >= 50 ? inside : outside) += 1;
    const std::string& title = drawn.at(n.id()).title;
    if (outside)
      EXPECT_NE(title.find(std::to_string(outside) + " dependencies outside this view"), std::string::npos) << title;
    else EXPECT_EQ(title.find("outside this view"), std::string::npos) << title;
  }
  EXPECT_EQ(st.edges, inside);
}

TEST(Selection, AroundTakesNodesWithinDepthHopsBothWays) {
  TempDir td;
  std::string in = test::generated(td, "chain", 50);
  visualize(in, td.file("a.dot"), VizSelection{std::nullopt, uint64_t(25), 3});
  std::string dot = test::read_file(td.file("a.dot"));
  for (uint64_t id = 0; id < 50; ++id)
    EXPECT_EQ(dot.find("\\n#" + std::to_string(id) + " ") != std::string::npos, id >= 22 && id <= 28) << id;
  EXPECT_EQ(test::count(dot, " -> "), 6u);
  // depth 0: the node alone
  EXPECT_EQ(visualize(in, td.file("b.dot"), VizSelection{std::nullopt, uint64_t(0), 0}).nodes, 1u);
}

TEST(Selection, RangeSyntax) {
  EXPECT_EQ(parse_id_range("3:9"), std::make_pair(uint64_t(3), uint64_t(9)));
  EXPECT_EQ(parse_id_range("7:"), std::make_pair(uint64_t(7), UINT64_MAX));
  EXPECT_EQ(parse_id_range(":4"), std::make_pair(uint64_t(0), uint64_t(4)));
  EXPECT_EQ(parse_id_range("5:5"), std::make_pair(uint64_t(5), uint64_t(5)));
  for (const char* bad : {"", ":", "5", "9:3", "a:b", "-1:4", "1:2:3", "99999999999999999999:1"})
    EXPECT_THROW(parse_id_range(bad), InputError) << bad;
}

// The validator would reject this graph; the picture still shows it, and says what is wrong.
TEST(Broken, CyclesMissingDepsAndDuplicateIdsAreDrawnAndCounted) {
  TempDir td;
  test::write_et(td.file("b.et"), {test::node(1, "a"), test::node(2, "b", {1, 3}), test::node(3, "c", {2}),
                                   test::node(4, "d", {99}), test::node(4, "d again", {1})});
  auto st = visualize(td.file("b.et"), td.file("b.html"), {});
  EXPECT_EQ(st.nodes, 5u);
  EXPECT_EQ(st.missing_deps, 1u);
  EXPECT_EQ(st.duplicate_ids, 1u);
  EXPECT_EQ(st.cyclic, 2u);
  std::string html = test::read_file(td.file("b.html"));
  EXPECT_NE(html.find("2 nodes on dependency cycles"), std::string::npos);
}

TEST(Escaping, AwkwardNamesKeepTheFormatsIntact) {
  TempDir td;
  test::write_et(td.file("w.et"), test::awkward_nodes());
  visualize(td.file("w.et"), td.file("w.dot"), {});
  std::string dot = test::read_file(td.file("w.dot"));
  EXPECT_NE(dot.find("label=\"say \\\"hi\\\" <b>&amp;</b>\\n#0 "), std::string::npos) << dot;
  EXPECT_NE(dot.find("back\\\\slash\\\\n and \\\\\\\""), std::string::npos);
  for (char c : dot) EXPECT_TRUE(uint8_t(c) >= 0x20 || c == '\n') << int(c);
  visualize(td.file("w.et"), td.file("w.html"), {});
  std::string html = test::read_file(td.file("w.html"));
  EXPECT_NE(html.find("say &quot;hi&quot; &lt;b&gt;&amp;amp;&lt;/b&gt;"), std::string::npos);
  EXPECT_EQ(html.find('\x01'), std::string::npos);
  EXPECT_EQ(html.find("\xef\xbf\xbe"), std::string::npos);
}

TEST(BadInput, OneLineNoOutputAndAnExistingOutputKept) {
  TempDir td;
  std::string chain = test::generated(td, "chain", 20);
  std::string big = test::generated(td, "chain", kHtmlMaxNodes + 1);
  test::write_file(td.file("cut.et"), test::read_file(chain).substr(0, 60));
  test::write_file(td.file("empty.et"), "");
  struct Case {
    std::string in, out;
    VizSelection sel;
    std::string expect;
  } cases[] = {
      {chain, "o.png", {}, td.file("o.png") + ": unknown output format"},
      {td.file("missing.et"), "o.html", {}, td.file("missing.et") + ": cannot open"},
      {td.file("cut.et"), "o.html", {}, td.file("cut.et") + ": record "},
      {td.file("empty.et"), "o.dot", {}, td.file("empty.et") + ": byte 0: empty .et stream"},
      {chain, "o.html", {std::nullopt, uint64_t(77), 2}, chain + ": --around: node 77 is not in the file"},
      {chain,
       "o.html",
       {std::make_pair(uint64_t(100), uint64_t(200)), std::nullopt, 2},
       chain + ": --range: no node selected (ids 100..200)"},
      {chain,
       "o.html",
       {std::make_pair(uint64_t(1), uint64_t(2)), uint64_t(1), 2},
       "--range: give --range or --around, not both"},
      {big, "o.html", {}, big + ": 10001 nodes selected; the HTML view takes up to 10000"},
  };
  for (const auto& c : cases) {
    test::write_file(td.file(c.out), "precious");
    std::string msg;
    try {
      visualize(c.in, td.file(c.out), c.sel);
    } catch (const InputError& e) {
      msg = e.what();
    }
    EXPECT_EQ(msg.rfind(c.expect, 0), 0u) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos);
    EXPECT_EQ(test::read_file(td.file(c.out)), "precious") << c.expect;
  }
  // the big graph as .dot is fine: the limit is the HTML layout's
  EXPECT_EQ(visualize(big, td.file("big.dot"), {}).nodes, kHtmlMaxNodes + 1);
  EXPECT_EQ(std::system(("test -z \"$(ls -A '" + td.path() + "' | grep tmp)\"").c_str()), 0) << "temp files left";
}

TEST(Cli, ExitTwoOnBadInputZeroWithWarningsOnABrokenGraph) {
  const char* bin = std::getenv("OPFORGE_EXE");
  if (!bin) GTEST_SKIP() << "OPFORGE_EXE (path of the opforge binary) not set";
  TempDir td;
  auto run = [&](const std::string& args, std::string& err) {
    FILE* p = popen((std::string(bin) + " " + args + " 2>&1").c_str(), "r");
    err.clear();
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) err.append(buf, n);
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  };
  std::string err, chain = test::generated(td, "chain", 10);
  EXPECT_EQ(run("chakra visualize " + chain + " -o " + td.file("x.html") + " --range 9:3", err), 2);
  EXPECT_EQ(err, "opforge: --range: '9:3': expected A:B (node ids, A <= B; A: and :B are open)\n");
  EXPECT_FALSE(test::exists(td.file("x.html")));
  EXPECT_EQ(run("chakra visualize " + chain + " -o " + td.file("x.html") + " --around 4 --depth 1", err), 0) << err;
  EXPECT_EQ(test::html_nodes(test::read_file(td.file("x.html"))).size(), 3u);
  test::write_et(td.file("b.et"), {test::node(1, "a", {5})});
  EXPECT_EQ(run("chakra visualize " + td.file("b.et") + " -o " + td.file("b.graphml"), err), 0);
  EXPECT_NE(err.find("warning: " + td.file("b.et") + ": 1 dependencies on ids not in the file"), std::string::npos)
      << err;
}

}  // namespace
}  // namespace opf::chakra
