// Golden regression: every usable trace of shared/traces converted (default mode) or read (.et),
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
  std::string g = "M\tversion=\n"
                  "N\t1\tCOMP_NODE\taten::mm\tctrl=\tdata=\tstart=0\tdur=5\tin=aa\tout=bb\trf_id=i64:1\n"
                  "N\t2\tCOMP_NODE\taten::relu\tctrl=1\tdata=1\tstart=0\tdur=2\tin=cc\tout=dd\trf_id=i64:2\n";
  std::string now = "M\tversion=\n"
                    "N\t1\tCOMP_NODE\taten::mm\tctrl=\tdata=\tstart=0\tdur=7\tin=aa\tout=bb\trf_id=i64:1\n"
                    "N\t3\tCOMP_NODE\tnew\tctrl=\tdata=1\tstart=0\tdur=1\tin=cc\tout=dd\trf_id=i64:3\n";
  auto d = diff_summaries(g, now);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0], "node 1 (aten::mm): field dur: golden '5' now '7'");
  EXPECT_EQ(d[1], "node 2 (aten::relu): missing now");
  EXPECT_EQ(d[2], "node 3 (new): new node");
}

}  // namespace
}  // namespace opf::chakra
