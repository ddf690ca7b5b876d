// Golden regression: every trace of the corpus (data/traces) converted (default mode) or read (.et),
// summarised per node and compared with the reviewed summary in chakra/tests/golden/. A failure
// lists the changed nodes and fields; `opforge chakra regress --update` rewrites the goldens.
#include <gtest/gtest.h>

#include "regress.h"
#include "test_util.h"

namespace opf::chakra {
namespace {

std::vector<std::string> golden_case_names() {
  std::vector<std::string> names;
  for (const auto& c : regress_cases())
    if (c.name.rfind("ref_", 0) != 0) names.push_back(c.name);
  return names;
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, MatchesReviewedSummary) { test::expect_regress_case(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Chakra, Golden, ::testing::ValuesIn(golden_case_names()), [](const auto& info) {
  std::string n = info.param;
  for (char& c : n)
    if (!std::isalnum(uint8_t(c))) c = '_';
  return n;
});

TEST(GoldenDiff, NamesChangedNodesAndFields) {
  std::string g =
      "M\tversion=\n"
      "N\t1\tCOMP_NODE\taten::mm\tctrl=\tdata=\tstart=0\tdur=5\tin=aa\tout=bb\trf_id=i64:1\n"
      "N\t2\tCOMP_NODE\taten::relu\tctrl=1\tdata=1\tstart=0\tdur=2\tin=cc\tout=dd\trf_id=i64:2\n";
  std::string now =
      "M\tversion=\n"
      "N\t1\tCOMP_NODE\taten::mm\tctrl=\tdata=\tstart=0\tdur=7\tin=aa\tout=bb\trf_id=i64:1\n"
      "N\t3\tCOMP_NODE\tnew\tctrl=\tdata=1\tstart=0\tdur=1\tin=cc\tout=dd\trf_id=i64:3\n";
  auto d = diff_summaries(g, now);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0], "node 1 (aten::mm): field dur: golden '5' now '7'");
  EXPECT_EQ(d[1], "node 2 (aten::relu): missing now");
  EXPECT_EQ(d[2], "node 3 (new): new node");
}

// Every input of every case is in the repository: a corpus change that drops one fails here
// with the missing path, before the case itself runs.
TEST(Corpus, HoldsEveryInputAndReferenceTheCasesName) {
  size_t files = 0;
  for (const auto& c : regress_cases())
    for (const std::string* rel : {&c.input, &c.ref_et, &c.ref_json, &c.ref_log})
      if (!rel->empty()) {
        ++files;
        EXPECT_TRUE(test::exists(default_traces_dir() + "/" + *rel)) << c.name << ": " << *rel;
      }
  EXPECT_GE(files, regress_cases().size());
}

// A missing corpus or input is a failure that says why, never a skip or an empty pass.
TEST(RegressRun, MissingCorpusFailsWithItsReason) {
  RegressOptions o;
  o.traces_dir = "/nonexistent/opforge-traces";
  o.golden_dir = OPF_CHAKRA_GOLDEN_DIR;
  std::vector<std::string> lines;
  EXPECT_FALSE(run_regress(o, [&](const std::string& l) { lines.push_back(l); }));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("trace corpus /nonexistent/opforge-traces not found; no trace converted"), std::string::npos)
      << lines[0];
}

TEST(RegressRun, MissingInputFailsItsCase) {
  test::TempDir empty;
  RegressOptions o;
  o.traces_dir = empty.path();
  o.golden_dir = OPF_CHAKRA_GOLDEN_DIR;
  o.only = "pt2_et";
  auto res = regress(o);
  ASSERT_EQ(res.size(), 1u);
  EXPECT_FALSE(res[0].ok);
  ASSERT_FALSE(res[0].messages.empty());
  EXPECT_NE(res[0].messages[0].find("facebookresearch-param/pt2_et.json.gz not found"), std::string::npos)
      << res[0].messages[0];
}

TEST(RegressRun, ARunThatConvertsNothingFails) {
  RegressOptions o;
  o.traces_dir = default_traces_dir();
  o.golden_dir = OPF_CHAKRA_GOLDEN_DIR;
  o.only = "no_such_case";
  std::vector<std::string> lines;
  EXPECT_FALSE(run_regress(o, [&](const std::string& l) { lines.push_back(l); }));
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines.back().find("no trace converted (no case named 'no_such_case')"), std::string::npos) << lines.back();
}

}  // namespace
}  // namespace opf::chakra
