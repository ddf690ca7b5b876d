// The benchmark input tools: `scale` replicates a host ET with fresh, consistent ids and
// rf_ids; `synth-kineto` is deterministic per seed and yields a pair the linker matches fully.
#include <gtest/gtest.h>

#include <set>
#include <unordered_map>

#include "et_scale.h"
#include "kineto_synth.h"
#include "link_test_util.h"
#include "trace_linker.h"

namespace opf::chakra {
namespace {

TEST(ScaleSynth, ReplicatedTraceLinksCompletely) {
  const std::string dir = test::traces_dir();
  auto scratch = test::scratch_dir("scale");
  const std::string src = dir + "/mlcommons-chakra/host_et_1.0.2-chakra.0.0.4.json.gz";
  const auto scaled = (scratch / "x3.json.gz").string();
  ScaleStats ss = scale_host_et(src, scaled, 3);
  EXPECT_EQ(ss.input_nodes, 263u);
  EXPECT_EQ(ss.root_nodes, 2u);
  EXPECT_EQ(ss.output_nodes, 2u + 3u * 261u);

  simdjson::dom::parser p;
  simdjson::dom::element doc;
  const std::string text = test::read_text(scaled);
  ASSERT_FALSE(p.parse(text).get(doc));
  std::set<int64_t> ids, rfs;
  std::unordered_map<int64_t, int64_t> parent;
  for (auto n : doc["nodes"].get_array()) {
    int64_t id = int64_t(n["id"]);
    EXPECT_TRUE(ids.insert(id).second) << "duplicate id " << id;
    parent[id] = int64_t(n["ctrl_deps"]);
    for (auto a : n["attrs"].get_array()) {
      if (std::string_view(a["name"]) == "rf_id" && int64_t(a["value"]) != 0) {
        EXPECT_TRUE(rfs.insert(int64_t(a["value"])).second) << "duplicate rf_id " << int64_t(a["value"]);
      }
    }
  }
  EXPECT_EQ(rfs.size(), 3u * 261u) << "every non-root op keeps a unique rf_id";
  for (auto& [id, par] : parent) EXPECT_TRUE(ids.count(par)) << "node " << id << " lost its parent " << par;

  const auto k1 = (scratch / "k1.json").string(), k1b = (scratch / "k1b.json").string(),
             k2 = (scratch / "k2.json").string();
  SynthStats s1 = synth_kineto(scaled, k1, 7);
  synth_kineto(scaled, k1b, 7);
  synth_kineto(scaled, k2, 8);
  EXPECT_EQ(test::read_text(k1), test::read_text(k1b)) << "same seed, same bytes";
  EXPECT_NE(test::read_text(k1), test::read_text(k2)) << "the seed changes the timings";
  EXPECT_EQ(s1.threads, 1u);
  EXPECT_GT(s1.gpu_ops, 30u);

  LinkOptions o;
  o.host_path = scaled;
  o.kineto_path = k1;
  o.output_path = (scratch / "linked.json").string();
  LinkStats st = link_traces(o);
  EXPECT_EQ(st.match_key, "Record function id");
  EXPECT_EQ(st.matched, 3u * 261u) << "every non-root op finds its Kineto op";
  EXPECT_EQ(st.matched_name_mismatch, 0u);
  EXPECT_EQ(st.gpu_ops_parented, s1.gpu_ops);
  EXPECT_EQ(st.gpu_ops_orphaned, 0u);
  EXPECT_EQ(st.gpu_nodes_emitted, s1.gpu_ops);
  std::filesystem::remove_all(scratch);
}

}  // namespace
}  // namespace opf::chakra
