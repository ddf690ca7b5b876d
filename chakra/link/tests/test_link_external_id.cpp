// Beyond the reference: same-run pairs recorded by older PyTorch (host ET schema 1.0.1, Kineto
// without "Record function id", no ProfilerStep) link through "External id". The dlrm pair has
// External id = rf_id + 1, which the linker must detect. Checked on the written graph: how many
// host ops got timing, that they matched ops of the same name, GPU nodes sit right after and
// under a CPU node, durations are sane, ids are dense, parents and inter-thread deps resolve.
#include <gtest/gtest.h>

#include <unistd.h>

#include <set>
#include <unordered_map>

#include "link_test_util.h"
#include "trace_linker.h"

namespace opf::chakra {
namespace {

struct Pair {
  const char* name;
  const char* host;
  const char* kineto;
  const char* offsets;  // expected "External id = rf_id + offset" per host thread ("" = not checked)
  size_t min_matched;   // of the host nodes
  size_t min_gpu;
};

void check_graph(const std::string& path, const LinkStats& st, bool flat_parent) {
  simdjson::dom::parser p;
  simdjson::dom::element doc;
  ASSERT_FALSE(p.load(path).get(doc));
  simdjson::dom::array nodes;
  ASSERT_FALSE(doc["nodes"].get(nodes));
  const char* pkey = flat_parent ? "parent" : "ctrl_deps";
  std::unordered_map<int64_t, simdjson::dom::element> by_id;
  int64_t expect = 0;
  for (auto n : nodes) {
    int64_t id = -1;
    ASSERT_FALSE(n["id"].get(id));
    ASSERT_EQ(id, expect++) << "ids are dense and ascending";
    by_id[id] = n;
  }
  EXPECT_EQ(size_t(expect), st.output_nodes);
  size_t gpu = 0, timed = 0, itd = 0;
  for (auto n : nodes) {
    int64_t id = int64_t(n["id"]);
    simdjson::dom::element par;
    if (!n[pkey].get(par) && !par.is_null()) {
      ASSERT_TRUE(par.is_int64()) << "node " << id;
      EXPECT_TRUE(by_id.count(int64_t(par))) << "node " << id << " has a parent that is not a node";
    }
    double incl = 0, excl = 0;
    if (!n["inclusive_dur"].get(incl)) {
      ++timed;
      ASSERT_FALSE(n["exclusive_dur"].get(excl));
      EXPECT_GE(incl, 0) << "node " << id;
      EXPECT_GE(excl, 0) << "node " << id;
      EXPECT_LE(excl, incl) << "node " << id;
    }
    simdjson::dom::element dep;
    std::string_view is_gpu;
    if (!n["inter_thread_dep"].get(dep) && !dep.is_null()) {
      if (n["cat"].get(is_gpu)) ++itd;  // GPU copies repeat their launcher's dependency
      EXPECT_TRUE(by_id.count(int64_t(dep)) && int64_t(dep) < id) << "node " << id;
    }
    std::string_view cat;
    if (n["cat"].get(cat)) continue;
    ++gpu;
    EXPECT_TRUE(cat == "kernel" || cat == "gpu_memcpy");
    int64_t parent = int64_t(n[pkey]);
    ASSERT_TRUE(by_id.count(parent));
    auto pn = by_id[parent];
    std::string_view pcat;
    EXPECT_TRUE(pn["cat"].get(pcat) != simdjson::SUCCESS) << "GPU node " << id << " hangs off another GPU node";
    EXPECT_LT(parent, id);
    for (int64_t between = parent + 1; between < id; ++between)
      EXPECT_FALSE(by_id[between]["cat"].get(pcat)) << "GPU node " << id << " is not right after its launcher";
    EXPECT_GE(double(n["ts"]), double(pn["ts"])) << "kernel " << id << " starts before its launching op";
  }
  EXPECT_EQ(gpu, st.gpu_nodes_emitted);
  EXPECT_EQ(timed, st.matched + st.gpu_nodes_emitted);
  EXPECT_EQ(itd, st.inter_thread_deps);
}

class ExternalIdPairs : public ::testing::TestWithParam<Pair> {};

TEST_P(ExternalIdPairs, LinkThroughExternalId) {
  const std::string dir = test::traces_dir();
  const Pair c = GetParam();
  auto scratch = test::scratch_dir(c.name);
  LinkOptions o;
  o.host_path = dir + "/" + c.host;
  o.kineto_path = dir + "/" + c.kineto;
  o.output_path = (scratch / "linked.json").string();
  LinkStats st = link_traces(o);
  EXPECT_EQ(st.match_key, "External id");
  if (*c.offsets) {
    EXPECT_NE(st.external_id_offsets.find(c.offsets), std::string::npos) << st.external_id_offsets;
  }
  EXPECT_GE(st.matched, c.min_matched) << "of " << st.host_nodes << " (" << st.external_id_offsets << ")";
  // the offsets found make at least 3/4 of the host ops with a candidate agree by name
  EXPECT_LT(st.matched_name_mismatch * 3, st.matched) << st.external_id_offsets;
  EXPECT_GE(st.gpu_nodes_emitted, c.min_gpu);
  EXPECT_EQ(st.gpu_ops_orphaned, 0u);
  check_graph(o.output_path, st, /*flat_parent=*/true);

  // The reference matches on "Record function id" only: nothing gets timing.
  o.compat_reference = true;
  o.output_path = (scratch / "linked_compat.json").string();
  LinkStats ref = link_traces(o);
  EXPECT_EQ(ref.matched, 0u);
  std::filesystem::remove_all(scratch);
}

INSTANTIATE_TEST_SUITE_P(SameRun, ExternalIdPairs,
                         ::testing::Values(
                             // several iterations in Kineto, one in the ET: the earliest iteration whose names agree
                             Pair{"linear", "facebookresearch-param/linear_et.json.gz",
                                  "facebookresearch-param/linear_kineto.json.gz", "", 850, 150},
                             Pair{"dlrm", "facebookresearch-param/dlrm_eg_0.json.gz",
                                  "facebookresearch-param/dlrm_worker0_step_12.1694128201545.pt.trace.json.gz",
                                  "host tid 1: +1", 1250, 150},
                             Pair{"simple_add", "facebookresearch-hta/benchmark_simple_add_et.json.gz",
                                  "facebookresearch-hta/benchmark_simple_add_trace.json.gz", "host tid 1: +0", 36, 4}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(LinkPaths, RelativePathsWork) {
  const std::string dir = test::traces_dir();
  auto scratch = test::scratch_dir("relative");
  auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir);
  LinkOptions o;
  o.host_path = "facebookresearch-hta/benchmark_simple_add_et.json.gz";
  o.kineto_path = "./facebookresearch-hta/../facebookresearch-hta/benchmark_simple_add_trace.json.gz";
  o.output_path = std::filesystem::relative(scratch / "out.json", dir).string();
  LinkStats st;
  EXPECT_NO_THROW(st = link_traces(o));
  std::filesystem::current_path(cwd);
  EXPECT_GT(st.matched, 0u);
  EXPECT_TRUE(std::filesystem::exists(scratch / "out.json"));
  std::filesystem::remove_all(scratch);
}

}  // namespace
}  // namespace opf::chakra
