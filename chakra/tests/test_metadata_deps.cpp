// Default-mode fix: no node waits on a METADATA node (metadata_deps.h). Checked with a replay
// that treats METADATA nodes the way ASTRA-sim's workload loop does — completed without
// issuing the children they free — on the real 1.0.2 host trace and on a synthetic one.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <set>

#include "converter.h"
#include "et_stream.h"
#include "metadata_deps.h"
#include "proto/et_def.pb.h"
#include "test_util.h"

namespace opf::chakra {
namespace {

using test::et_node;
using test::TempDir;

std::vector<ChakraProtoMsg::Node> read_nodes(const std::string& path) {
  EtReader r(path, false);
  ChakraProtoMsg::GlobalMetadata m;
  EXPECT_TRUE(r.next(m));
  std::vector<ChakraProtoMsg::Node> out;
  for (ChakraProtoMsg::Node n; r.next(n);) out.push_back(n);
  return out;
}

// How many nodes ASTRA-sim's loop would run: a node issues once all its data and ctrl deps are
// done; finishing a non-METADATA node issues its children that became ready, finishing a
// METADATA node issues nothing (the hazard this fix removes).
size_t astra_like_drained(const std::vector<ChakraProtoMsg::Node>& nodes) {
  std::map<uint64_t, const ChakraProtoMsg::Node*> by_id;
  std::map<uint64_t, std::vector<uint64_t>> children;
  for (const auto& n : nodes) by_id[n.id()] = &n;
  auto deps_of = [](const ChakraProtoMsg::Node& n) {
    std::set<uint64_t> d(n.data_deps().begin(), n.data_deps().end());
    d.insert(n.ctrl_deps().begin(), n.ctrl_deps().end());
    return d;
  };
  std::deque<uint64_t> q;
  for (const auto& n : nodes) {
    auto d = deps_of(n);
    if (d.empty()) q.push_back(n.id());
    for (uint64_t p : d) children[p].push_back(n.id());
  }
  std::set<uint64_t> done, issued(q.begin(), q.end());
  while (!q.empty()) {
    const uint64_t id = q.front();
    q.pop_front();
    done.insert(id);
    if (by_id[id]->type() == ChakraProtoMsg::METADATA_NODE) continue;
    for (uint64_t c : children[id]) {
      if (issued.count(c)) continue;
      auto d = deps_of(*by_id[c]);
      if (std::all_of(d.begin(), d.end(), [&](uint64_t x) { return done.count(x) != 0; })) {
        issued.insert(c);
        q.push_back(c);
      }
    }
  }
  return done.size();
}

ConvertOptions quiet(bool compat) {
  ConvertOptions o;
  o.compat_reference = compat;
  o.warn = [](const std::string&) {};
  return o;
}

TEST(DefaultMode, NoNodeWaitsOnAMetadataNodeInThe102HostTrace) {
  TempDir td;
  const std::string in =
      std::string(OPF_CHAKRA_TEST_DATA) + "/traces/mlcommons-chakra/host_et_1.0.2-chakra.0.0.4.json.gz";
  convert(in, td.file("ref.et"), quiet(true));
  ConvertStats st = convert(in, td.file("def.et"), quiet(false));
  const auto ref = read_nodes(td.file("ref.et")), def = read_nodes(td.file("def.et"));
  ASSERT_EQ(ref.size(), def.size()) << "the fix changes edges, not the node set";
  EXPECT_EQ(astra_like_drained(ref), 2u) << "the hazard: root 2 and METADATA 3 run, then nothing";
  EXPECT_EQ(astra_like_drained(def), def.size());
  EXPECT_EQ(st.metadata_bypassed, 1u);

  std::set<uint64_t> metadata;
  for (const auto& n : def)
    if (n.type() == ChakraProtoMsg::METADATA_NODE) metadata.insert(n.id());
  ASSERT_EQ(metadata, std::set<uint64_t>{3});
  for (size_t i = 0; i < def.size(); ++i) {
    const auto& n = def[i];
    for (uint64_t d : n.data_deps()) EXPECT_FALSE(metadata.count(d)) << "node " << n.id();
    for (uint64_t d : n.ctrl_deps()) EXPECT_FALSE(metadata.count(d) && n.type() != ChakraProtoMsg::METADATA_NODE);
    // node 4 (aten::empty) moves from METADATA 3 to 3's parent, the thread root 2; nothing else changes
    std::vector<uint64_t> want(ref[i].data_deps().begin(), ref[i].data_deps().end());
    if (n.id() == 4) want = {2};
    EXPECT_EQ(std::vector<uint64_t>(n.data_deps().begin(), n.data_deps().end()), want) << "node " << n.id();
  }
}

// 2 thread root; 3 METADATA with a child 6; 4, 5 ops; METADATA chain 7 -> 8 with child 9.
// Pre-order chain: 2, 3, 6, 4, 5, 7, 8, 9.
std::string metadata_trace() {
  const std::string k = "[pytorch|profiler|execution_trace|";
  return test::et_trace(et_node(1, k + "process]", "1") + ", " + et_node(2, k + "thread]", "1") + ", " +
                        et_node(3, "## process_group:init ##", "2") + ", " + et_node(6, "aten::in_init", "3") + ", " +
                        et_node(4, "aten::mm", "2") + ", " + et_node(5, "aten::relu", "2") + ", " +
                        et_node(7, "## process_group:init a ##", "2") + ", " +
                        et_node(8, "## process_group:init b ##", "7") + ", " + et_node(9, "aten::add", "8"));
}

TEST(DefaultMode, NoNodeWaitsOnAMetadataNodeThroughChainsAndCtrlDeps) {
  TempDir td;
  test::write_file(td.file("t.json"), metadata_trace());
  convert(td.file("t.json"), td.file("ref.et"), quiet(true));
  convert(td.file("t.json"), td.file("def.et"), quiet(false));
  std::map<uint64_t, std::pair<std::vector<uint64_t>, std::vector<uint64_t>>> ref, def;
  for (const auto& n : read_nodes(td.file("ref.et")))
    ref[n.id()] = {{n.data_deps().begin(), n.data_deps().end()}, {n.ctrl_deps().begin(), n.ctrl_deps().end()}};
  for (const auto& n : read_nodes(td.file("def.et")))
    def[n.id()] = {{n.data_deps().begin(), n.data_deps().end()}, {n.ctrl_deps().begin(), n.ctrl_deps().end()}};
  using V = std::vector<uint64_t>;
  // the reference's edges, which strand 6 and 9 behind METADATA nodes
  EXPECT_EQ(ref[6], std::make_pair(V{3}, V{3}));
  EXPECT_EQ(ref[9], std::make_pair(V{8}, V{8}));
  // default: 6 moves to 3's parent; 9 moves past the whole METADATA chain 8 -> 7 to 5 (data)
  // and 2 (ctrl: 8's parent 7, whose parent is 2)
  EXPECT_EQ(def[6], std::make_pair(V{2}, V{2}));
  EXPECT_EQ(def[9], std::make_pair(V{5}, V{2}));
  // METADATA nodes keep their own deps; the other nodes are untouched (but for the thread root's
  // ctrl dep on the removed process root, the older default-mode fix)
  EXPECT_EQ(def[2], std::make_pair(V{}, V{}));
  for (uint64_t id : {3, 4, 5, 7, 8}) EXPECT_EQ(def[id], ref[id]) << "node " << id;
  EXPECT_EQ(def[4].first, V{6});
}

TEST(MetadataDeps, KeepsOrderDropsDuplicatesAndSurvivesMetadataCycles) {
  std::vector<EtNode> g(6);
  for (size_t k = 0; k < g.size(); ++k) g[k].id = 10 + k;
  g[1].data_deps = {10};              // 11: METADATA under 10
  g[2].data_deps = {14, 15};          // 12: METADATA in a cycle with 14... and 15 (METADATA)
  g[4].data_deps = {12};              // 14: METADATA
  g[5].data_deps = {10};              // 15: METADATA
  g[3].data_deps = {11, 10, 12, 99};  // 13: work
  const std::vector<bool> meta = {false, true, true, false, true, true};
  EXPECT_EQ(bypass_metadata_data_deps(g, meta), 1u);
  EXPECT_EQ(g[3].data_deps, (std::vector<uint64_t>{10, 99})) << "11 -> 10; 12 -> {14 (cycle: nothing), 15 -> 10}";
  EXPECT_EQ(g[2].data_deps, (std::vector<uint64_t>{14, 15})) << "METADATA nodes keep their deps";
}

}  // namespace
}  // namespace opf::chakra
