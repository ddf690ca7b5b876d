// --compat reference against the reference linker's own output on the synthetic-linked pairs:
// same graph (ids, names, deps, durations, keys, key order, value kinds, exact floats) and,
// beyond that, the same bytes (json.dump indent=4 layout), so link + convert reproduces the
// reference .et.
#include <gtest/gtest.h>

#include "link_test_util.h"
#include "trace_linker.h"

namespace opf::chakra {
namespace {

struct Case {
  const char* host;
  const char* kineto;
  const char* ref;
  size_t nodes, gpu;
};

class LinkCompat : public ::testing::TestWithParam<Case> {};

TEST_P(LinkCompat, SameGraphAndBytesAsReference) {
  const std::string dir = test::traces_dir();
  const Case c = GetParam();
  auto out = test::scratch_dir("compat") / "linked.json";
  LinkOptions o;
  o.host_path = dir + "/" + c.host;
  o.kineto_path = dir + "/" + c.kineto;
  o.output_path = out.string();
  o.compat_reference = true;
  LinkStats st = link_traces(o);
  EXPECT_EQ(st.output_nodes, c.nodes);
  EXPECT_EQ(st.gpu_nodes_emitted, c.gpu);

  const std::string ours = test::read_text(out), ref = test::read_text(dir + "/" + c.ref);
  simdjson::dom::parser pa, pb;
  simdjson::dom::element a, b;
  ASSERT_FALSE(pa.parse(ours).get(a));
  ASSERT_FALSE(pb.parse(ref).get(b));
  EXPECT_EQ(test::json_diff(a, b), "");
  EXPECT_TRUE(ours == ref) << "graphs agree but the text differs (" << ours.size() << " vs " << ref.size() << " bytes)";
  std::filesystem::remove_all(out.parent_path());
}

INSTANTIATE_TEST_SUITE_P(Reference, LinkCompat,
                         ::testing::Values(Case{"mlcommons-chakra/host_et_1.0.2-chakra.0.0.4.json.gz",
                                                "synthetic-linked/c102_kineto_synth.json.gz",
                                                "synthetic-linked/c102_linked.ref.json.gz", 303, 40},
                                           Case{"facebookresearch-param/resnet_et.json.gz",
                                                "synthetic-linked/resnet_kineto_synth.json.gz",
                                                "synthetic-linked/resnet_linked.ref.json.gz", 16621, 2229}));

// Default mode differs from the reference only where the reference is buggy; on this pair
// (float timestamps, no ties, no dangling parents) the graph must be the same.
TEST(LinkDefault, C102SameGraphAsReferenceInCompactLayout) {
  const std::string dir = test::traces_dir();
  auto out = test::scratch_dir("default") / "linked.json";
  LinkOptions o;
  o.host_path = dir + "/mlcommons-chakra/host_et_1.0.2-chakra.0.0.4.json.gz";
  o.kineto_path = dir + "/synthetic-linked/c102_kineto_synth.json.gz";
  o.output_path = out.string();
  link_traces(o);
  simdjson::dom::parser pa, pb;
  simdjson::dom::element a, b;
  const std::string ours = test::read_text(out);
  ASSERT_FALSE(pa.parse(ours).get(a));
  const std::string ref = test::read_text(dir + "/synthetic-linked/c102_linked.ref.json.gz");
  ASSERT_FALSE(pb.parse(ref).get(b));
  EXPECT_EQ(test::json_diff(a, b), "");
  EXPECT_LT(ours.size(), ref.size() / 2);
  std::filesystem::remove_all(out.parent_path());
}

}  // namespace
}  // namespace opf::chakra
