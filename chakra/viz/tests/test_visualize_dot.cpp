// Graphviz reads the .dot views: `dot -Tsvg` on generated graphs, a text-workload graph, a cut
// graph and awkward names must succeed and draw one node per node and one edge per dependency.
// Exits 77 (skipped) when `dot` is not on PATH.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>

#include "from_text.h"
#include "viz_test_util.h"

namespace opf::chakra {
namespace {

using test::TempDir;

int sh(const std::string& cmd) {
  int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

void expect_dot_draws(const std::string& et, const std::string& dot_file, const VizSelection& sel = {}) {
  auto st = visualize(et, dot_file, sel);
  std::string svg = dot_file + ".svg";
  ASSERT_EQ(sh("dot -Tsvg '" + dot_file + "' -o '" + svg + "' 2>'" + dot_file + ".err'"), 0)
      << et << ": " << test::read_file(dot_file + ".err");
  std::string text = test::read_file(svg);
  EXPECT_EQ(test::count(text, "class=\"node\""), st.nodes) << et;
  EXPECT_EQ(test::count(text, "class=\"edge\""), st.edges) << et;
  EXPECT_EQ(test::read_file(dot_file + ".err"), "") << "dot warned";
}

TEST(Graphviz, DotTsvgDrawsEveryNodeAndEdge) {
  TempDir td;
  expect_dot_draws(test::generated(td, "dag", 300), td.file("dag.dot"));
  expect_dot_draws(test::generated(td, "all-types", 21), td.file("all.dot"));
  expect_dot_draws(test::generated(td, "fan", 200), td.file("fan.dot"));
  expect_dot_draws(test::generated(td, "chain", 400), td.file("cut.dot"), VizSelection{std::nullopt, uint64_t(200), 5});
  test::write_et(td.file("awkward.et"), test::awkward_nodes());
  expect_dot_draws(td.file("awkward.et"), td.file("awkward.dot"));
}

TEST(Graphviz, ATextWorkloadGraph) {
  TempDir td;
  FromTextOptions o;
  o.passes = 2;
  o.warn = [](const std::string&) {};
  from_text(std::string(OPF_TEXT_DATA) + "/DLRM_HybridParallel/DLRM_HybridParallel.txt", td.file("dlrm"), o);
  expect_dot_draws(td.file("dlrm.0.et"), td.file("dlrm.dot"));
}

TEST(Graphviz, TheCheckFailsOnBrokenDot) {
  TempDir td;
  test::write_file(td.file("bad.dot"), "digraph { a -> ; }\n");
  EXPECT_NE(sh("dot -Tsvg '" + td.file("bad.dot") + "' -o /dev/null 2>/dev/null"), 0);
}

}  // namespace
}  // namespace opf::chakra

int main(int argc, char** argv) {
  if (std::system("command -v dot >/dev/null 2>&1") != 0) {
    std::printf(
        "SKIP: Graphviz 'dot' is not on PATH (Debian: apt-get install graphviz); the .dot views are not checked\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
