// simulate --timeline on real inputs from the repo's test data (the 1.0.2 host trace converted,
// the text converter's DLRM files for 4 NPUs) and on generated collectives (GPU compute and
// comm streams): valid JSON, one event per node, per-rank processes, no overlap on a thread
// (the simulator serializes the CPU and each stream), times equal to the simulator's log.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "converter.h"
#include "et_generator.h"
#include "et_load.h"
#include "sim_timeline.h"
#include "simulator.h"
#include "timeline_test_util.h"

namespace opf::chakra {
namespace {

using test::TempDir;

// Checks the promises of the timeline for `files` (one per rank) and returns its events.
// (Callers skip first without the binary.)
std::vector<test::XEvent> check_timeline(const std::vector<std::string>& files, const std::string& out) {
  std::string args;
  for (const auto& f : files) args += " " + f;
  auto r = test::run_cli("chakra simulate" + args + " --timeline " + out);
  EXPECT_EQ(r.rc, 0) << r.err;
  auto ev = test::x_events(test::read_file(out));
  std::set<int64_t> pids;
  for (size_t k = 0; k < files.size(); ++k) {
    LoadedEt et;
    load_et(files[k], false, et);
    const int64_t pid = rank_of_path(files[k], int64_t(k));
    pids.insert(pid);
    std::map<int64_t, int> seen;
    for (const auto& e : ev)
      if (e.pid == pid) ++seen[e.id];
    EXPECT_EQ(seen.size(), et.nodes.size()) << files[k];
    for (const auto& n : et.nodes) EXPECT_EQ(seen[int64_t(n.id)], 1) << files[k] << " node " << n.id;
    // the same start times as the simulator's own log lines
    std::map<uint64_t, uint64_t> issue_at;
    simulate(
        et.nodes, [](const std::string&) {}, [&](uint32_t i, uint64_t s, uint64_t) { issue_at[et.nodes[i].id] = s; });
    for (const auto& e : ev) {
      if (e.pid == pid) {
        EXPECT_EQ(e.ts, double(issue_at[uint64_t(e.id)])) << "node " << e.id;
      }
    }
  }
  EXPECT_EQ(pids.size(), files.size()) << "one process per rank";
  std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<double, double>>> by_thread;
  for (const auto& e : ev) {
    EXPECT_GE(e.dur, 1) << "a node holds its resource for at least one tick";
    by_thread[{e.pid, e.tid}].push_back({e.ts, e.ts + e.dur});
  }
  for (auto& [t, spans] : by_thread) {
    std::sort(spans.begin(), spans.end());
    for (size_t k = 1; k < spans.size(); ++k)
      EXPECT_LE(spans[k - 1].second, spans[k].first) << "overlap on pid " << t.first << " tid " << t.second;
  }
  return ev;
}

TEST(SimTimeline, HostTrace102Converted) {
  OPF_REQUIRE_CLI();
  TempDir td;
  ConvertOptions o;
  o.warn = [](const std::string&) {};
  convert(std::string(OPF_CHAKRA_TEST_DATA) + "/traces/mlcommons-chakra/host_et_1.0.2-chakra.0.0.4.json.gz",
          td.file("h.0.et"), o);
  auto ev = check_timeline({td.file("h.0.et")}, td.file("t.json"));
  std::set<int64_t> tids;
  for (const auto& e : ev) tids.insert(e.tid);
  EXPECT_EQ(tids, std::set<int64_t>{0}) << "CPU ops only";
}

TEST(SimTimeline, TextConverterFilesForFourNpus) {
  OPF_REQUIRE_CLI();
  const std::string p = std::string(OPF_TEXT_DATA) + "/DLRM_HybridParallel/DLRM_HybridParallel.npus4.passes2.";
  TempDir td;
  auto ev = check_timeline({p + "0.et.gz", p + "1.et.gz", p + "2.et.gz", p + "3.et.gz"}, td.file("t.json"));
  EXPECT_FALSE(ev.empty());
}

TEST(SimTimeline, GeneratedCollectivesUseComputeAndCommThreads) {
  OPF_REQUIRE_CLI();
  TempDir td;
  GenerateOptions g;
  g.kind = "collectives";
  g.nodes = 60;
  g.ranks = 3;
  g.seed = 4;
  generate(g, td.file("c"));
  auto ev = check_timeline({td.file("c.0.et"), td.file("c.1.et"), td.file("c.2.et")}, td.file("t.json"));
  const std::string json = test::read_file(td.file("t.json"));
  EXPECT_NE(json.find("\"GPU compute, stream "), std::string::npos);
  EXPECT_NE(json.find("\"GPU comm, stream "), std::string::npos);
}

TEST(SimTimeline, RankFromTheFileName) {
  EXPECT_EQ(rank_of_path("a/b.12.et", 0), 12);
  EXPECT_EQ(rank_of_path("b.3.et.gz", 0), 3);
  EXPECT_EQ(rank_of_path("b.et", 7), 7);
  EXPECT_EQ(rank_of_path("b.x1.et", 7), 7);
  EXPECT_EQ(rank_of_path("b.1.json", 7), 7);
}

TEST(SimTimeline, SameRankTwiceIsAnErrorAndWritesNothing) {
  OPF_REQUIRE_CLI();
  TempDir td;
  GenerateOptions g;
  g.kind = "chain";
  g.nodes = 5;
  generate(g, td.file("a"));
  generate(g, td.file("b"));
  auto r = test::run_cli("chakra simulate " + td.file("a.0.et") + " " + td.file("b.0.et") + " --timeline " +
                         td.file("t.json"));
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("rank 0 again"), std::string::npos) << r.err;
  EXPECT_FALSE(test::exists(td.file("t.json")));
}

}  // namespace
}  // namespace opf::chakra
