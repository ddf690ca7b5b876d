// Converter behaviour: the reference outputs reproduced byte for byte (--compat reference), and
// each reference bug the default mode fixes (docs/chakra.md §8), plus validator and simulator semantics.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>

#include "byte_source.h"
#include "converter.h"
#include "et_load.h"
#include "et_stream.h"
#include "input_error.h"
#include "jsonizer.h"
#include "proto/et_def.pb.h"
#include "regress.h"
#include "simulator.h"
#include "test_util.h"
#include "validator.h"

namespace opf::chakra {
namespace {

using test::et_node;
using test::et_trace;
using test::TempDir;

std::vector<ChakraProtoMsg::Node> read_nodes(const std::string& path, ChakraProtoMsg::GlobalMetadata* gm = nullptr) {
  EtReader r(path, false);
  ChakraProtoMsg::GlobalMetadata m;
  EXPECT_TRUE(r.next(m));
  if (gm) *gm = m;
  std::vector<ChakraProtoMsg::Node> out;
  ChakraProtoMsg::Node n;
  while (r.next(n)) out.push_back(n);
  return out;
}

const ChakraProtoMsg::AttributeProto* attr(const ChakraProtoMsg::Node& n, const std::string& name) {
  for (const auto& a : n.attr())
    if (a.name() == name) return &a;
  return nullptr;
}

ConvertOptions quiet(bool compat, std::vector<std::string>* warnings = nullptr) {
  ConvertOptions o;
  o.compat_reference = compat;
  o.warn = [warnings](const std::string& w) {
    if (warnings) warnings->push_back(w);
  };
  o.sim_line = [](const std::string&) {};
  return o;
}

// ---- reference reproduction (the oracle is the reference tool's output in data/traces/synthetic-linked)

class ReferenceOutput : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceOutput, ByteIdenticalInCompatMode) { test::expect_regress_case(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Chakra, ReferenceOutput,
                         ::testing::Values("ref_c102_linked", "ref_c102_host_unlinked", "ref_resnet_linked",
                                           "ref_resnet_host_unlinked"));

TEST(ReferenceSimulation, SimulatingTheReferenceEtGivesTheReferenceLogLines) {
  OPF_REQUIRE_TRACES();
  std::string dir = test::traces_dir() + "/synthetic-linked/";
  LoadedEt et;
  load_et(dir + "c102_linked.ref.et.gz", true, et);
  std::vector<std::string> got;
  simulate(et.nodes, [&](const std::string& l) { got.push_back(l); });
  std::vector<std::string> want;
  std::istringstream log(read_all(dir + "c102_linked.ref.convert_simulate.log.gz"));
  bool in_sim = false;
  for (std::string line; std::getline(log, line);) {
    line = line.substr(line.find("] ") + 2);  // strip "LEVEL [date time] "
    if (line == "Simulating execution of Chakra nodes based on data dependencies.") in_sim = true;
    else if (in_sim && line.rfind("Conversion successful", 0) != 0) want.push_back(line);
  }
  ASSERT_GT(want.size(), 500u);
  EXPECT_EQ(got, want);
}

// ---- default-mode fixes

// The other default-mode differences on this trace (start times, METADATA re-parenting) are
// undone here so that this test sees the ctrl-dep fix alone; test_metadata_deps.cpp and
// DefaultMode.WritesStartTimes* check them.
TEST(DefaultMode, NoCtrlDepToRemovedNodesButOtherwiseSameGraphAsReference) {
  OPF_REQUIRE_TRACES();
  TempDir td;
  std::string in = test::traces_dir() + "/synthetic-linked/c102_linked.ref.json.gz";
  convert(in, td.file("compat.et"), quiet(true));
  convert(in, td.file("default.et"), quiet(false));
  auto a = read_nodes(td.file("compat.et")), b = read_nodes(td.file("default.et"));
  ASSERT_EQ(a.size(), b.size());
  std::set<uint64_t> ids;
  std::map<uint64_t, std::vector<uint64_t>> metadata_deps;  // METADATA node -> its data deps
  for (const auto& n : b) {
    ids.insert(n.id());
    if (n.type() == ChakraProtoMsg::METADATA_NODE) metadata_deps[n.id()] = {n.data_deps().begin(), n.data_deps().end()};
  }
  ASSERT_EQ(metadata_deps.size(), 1u) << "c102 has one process_group:init";
  size_t dangling_in_reference = 0, reparented = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    for (uint64_t c : b[i].ctrl_deps()) EXPECT_TRUE(ids.count(c)) << "node " << b[i].id() << " ctrl dep " << c;
    if (b[i].name() != "[pytorch|profiler|execution_trace|thread]") {  // the linker gives it no ts
      EXPECT_GT(b[i].start_time_micros(), 0u) << "node " << b[i].id() << ": every op of a linked trace has a ts";
    }
    EXPECT_EQ(a[i].start_time_micros(), 0u);
    ChakraProtoMsg::Node x = a[i], y = b[i];
    y.clear_start_time_micros();
    bool had_dangling = x.ctrl_deps_size() == 1 && !ids.count(x.ctrl_deps(0));
    if (had_dangling) {
      ++dangling_in_reference;
      x.clear_ctrl_deps();
    }
    if (x.type() != ChakraProtoMsg::METADATA_NODE && x.data_deps_size() == 1 && metadata_deps.count(x.data_deps(0))) {
      ++reparented;
      x.clear_data_deps();
      for (uint64_t d : metadata_deps[a[i].data_deps(0)]) x.add_data_deps(d);
    }
    EXPECT_EQ(x.SerializeAsString(), y.SerializeAsString())
        << "node " << a[i].id() << " differs beyond the ctrl-dep fix";
  }
  EXPECT_EQ(dangling_in_reference, 1u) << "the reference writes the thread root with ctrl_deps=[0] (removed node)";
  EXPECT_EQ(reparented, 1u) << "aten::empty (3) waits on process_group:init (2) in the reference";
}

TEST(DefaultMode, ReadsSchema101FlatFormatThatTheReferenceRejects) {
  OPF_REQUIRE_TRACES();
  TempDir td;
  std::string in = test::traces_dir() + "/facebookresearch-hta/benchmark_simple_add_et.json.gz";
  EXPECT_THROW(
      {
        try {
          convert(in, td.file("c.et"), quiet(true));
        } catch (const InputError& e) {
          EXPECT_NE(std::string(e.what()).find("unsupported schema version '1.0.1'"), std::string::npos) << e.what();
          throw;
        }
      },
      InputError);
  EXPECT_FALSE(test::exists(td.file("c.et")));
  convert(in, td.file("d.et"), quiet(false));
  auto nodes = read_nodes(td.file("d.et"));
  ASSERT_GT(nodes.size(), 10u);
  // flat "parent"/"inputs"/"input_types" mapped to the same node model: the parent relation
  // drives the data-dep chain (1.0.1 lists children before parents, so few ctrl deps survive
  // the reference's "parent already converted" rule), IOInfo and attrs are filled
  size_t with_deps = 0, with_inputs = 0;
  for (const auto& n : nodes) {
    with_deps += n.data_deps_size() > 0;
    with_inputs += n.inputs().values() != "[]";
    ASSERT_NE(attr(n, "rf_id"), nullptr);
    ASSERT_NE(attr(n, "op_schema"), nullptr);
  }
  EXPECT_EQ(with_deps + 1, nodes.size()) << "every node but the thread root is on the chain";
  EXPECT_GT(with_inputs, 0u);
}

TEST(DefaultMode, ReadsSchema111Chakra100ThatCrashesTheReference) {
  TempDir td;
  test::write_file(td.file("t.json"), et_trace(test::small_host_nodes(), "1.1.1-chakra.1.0.0"));
  EXPECT_THROW(convert(td.file("t.json"), td.file("c.et"), quiet(true)), InputError);
  convert(td.file("t.json"), td.file("d.et"), quiet(false));
  ChakraProtoMsg::GlobalMetadata gm;
  auto nodes = read_nodes(td.file("d.et"), &gm);
  EXPECT_EQ(gm.attr(0).string_val(), "1.1.1-chakra.1.0.0");
  ASSERT_EQ(nodes.size(), 3u);  // process root removed as dangling
  EXPECT_EQ(nodes[2].name(), "aten::relu");
  ASSERT_EQ(nodes[2].data_deps_size(), 1);
  EXPECT_EQ(nodes[2].data_deps(0), 3u);
}

std::string nccl_trace(const std::string& kernel) {
  std::string tensor =
      R"J({"values": [[10, 11, 0, 256, 4, "cuda:0"]], "shapes": [[256]], "types": ["Tensor(float)"]})J";
  return et_trace(
      et_node(0, "[pytorch|profiler|execution_trace|process]", "0") + ", " +
      et_node(1, "[pytorch|profiler|execution_trace|thread]", "0") + ", " +
      et_node(2, "nccl:reduce", "1", "\"exclusive_dur\": 5.7", tensor) + ", " +
      et_node(3, kernel, "2", R"J("cat": "kernel", "stream": 20, "pg_name": "0", "exclusive_dur": 9.9)J", tensor));
}

TEST(DefaultMode, UnknownNcclKernelWarnsAndKeepsTheNodeInsteadOfAborting) {
  TempDir td;
  test::write_file(td.file("t.json"), nccl_trace("ncclDevKernel_Generic(ncclDevComm*)"));
  try {
    convert(td.file("t.json"), td.file("c.et"), quiet(true));
    FAIL() << "compat mode must abort like the reference";
  } catch (const InputError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("node 3"), std::string::npos) << m;
    EXPECT_NE(m.find("collective communication type"), std::string::npos) << m;
  }
  EXPECT_FALSE(test::exists(td.file("c.et")));
  std::vector<std::string> warnings;
  convert(td.file("t.json"), td.file("d.et"), quiet(false, &warnings));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("node 3"), std::string::npos) << warnings[0];
  auto nodes = read_nodes(td.file("d.et"));
  const auto& k = nodes.back();
  EXPECT_EQ(k.type(), ChakraProtoMsg::COMM_COLL_NODE);
  EXPECT_EQ(attr(k, "comm_type"), nullptr);
  ASSERT_NE(attr(k, "comm_size"), nullptr);
  EXPECT_EQ(attr(k, "comm_size")->int64_val(), 256 * 4);
  EXPECT_EQ(attr(k, "pg_name")->string_val(), "0");
  EXPECT_EQ(k.duration_micros(), 9u);  // int() truncation
}

TEST(DefaultMode, NcclReduceKernelGetsReduceType) {
  TempDir td;
  test::write_file(td.file("t.json"), nccl_trace("ncclDevKernel_Reduce_Sum_f32_RING_LL(ncclDevComm*)"));
  EXPECT_THROW(convert(td.file("t.json"), td.file("c.et"), quiet(true)), InputError);
  std::vector<std::string> warnings;
  convert(td.file("t.json"), td.file("d.et"), quiet(false, &warnings));
  EXPECT_TRUE(warnings.empty());
  auto nodes = read_nodes(td.file("d.et"));
  ASSERT_NE(attr(nodes.back(), "comm_type"), nullptr);
  EXPECT_EQ(attr(nodes.back(), "comm_type")->int64_val(), ChakraProtoMsg::REDUCE);
}

TEST(DefaultMode, CommSizeOfUnusualTensorLayoutWarnsInsteadOfCrashing) {
  TempDir td;
  std::string bad = R"J({"values": [[10, 11]], "shapes": [[2]], "types": ["Tensor(float)"]})J";
  std::string t = et_trace(et_node(0, "[pytorch|profiler|execution_trace|process]", "0") + ", " +
                           et_node(1, "[pytorch|profiler|execution_trace|thread]", "0") + ", " +
                           et_node(2, "nccl:all_reduce", "1", "", bad) + ", " +
                           et_node(3, "ncclDevKernel_AllReduce_Sum", "2", R"J("cat": "kernel", "stream": 20)J", bad));
  test::write_file(td.file("t.json"), t);
  EXPECT_THROW(convert(td.file("t.json"), td.file("c.et"), quiet(true)), InputError);
  std::vector<std::string> warnings;
  convert(td.file("t.json"), td.file("d.et"), quiet(false, &warnings));
  EXPECT_EQ(warnings.size(), 1u);
  EXPECT_EQ(attr(read_nodes(td.file("d.et")).back(), "comm_size")->int64_val(), 0);
}

// A linked trace where op 5 waited (cudaStreamSynchronize) for kernel 4: the reference drops every
// sync_dep (its start-time test reads start_time_micros, which it never sets); the default mode
// keeps those whose target starts before the waiting node, by the linked ts, unless the edge would
// close a cycle: op 8 waits for kernel 10, whose launcher 9 started earlier (ts) but has a higher
// id, so the per-thread chain already makes 9 depend on 8.
std::string sync_trace() {
  using test::et_node;
  return test::et_trace(
      et_node(1, "[pytorch|profiler|execution_trace|process]", "1") + ", " +
      et_node(2, "[pytorch|profiler|execution_trace|thread]", "1") + ", " +
      et_node(3, "aten::launch", "2", R"J("ts": 10, "exclusive_dur": 2)J") + ", " +
      et_node(4, "kernel_a", "3", R"J("cat": "kernel", "stream": 7, "ts": 12.5, "exclusive_dur": 8)J") + ", " +
      et_node(5, "aten::after_sync", "2", R"J("ts": 30, "exclusive_dur": 1, "sync_dep": [4])J") + ", " +
      et_node(6, "aten::earlier", "2", R"J("ts": 12.5, "exclusive_dur": 1, "sync_dep": [4])J") + ", " +
      et_node(7, "aten::no_target", "2", R"J("ts": 40, "exclusive_dur": 1, "sync_dep": [99])J") + ", " +
      et_node(8, "aten::waits_early", "2", R"J("ts": 50, "exclusive_dur": 1, "sync_dep": [10])J") + ", " +
      et_node(9, "aten::launch_b", "2", R"J("ts": 45, "exclusive_dur": 1)J") + ", " +
      et_node(10, "kernel_b", "9", R"J("cat": "kernel", "stream": 7, "ts": 47, "exclusive_dur": 2)J"));
}

const ChakraProtoMsg::Node& node_by_id(const std::vector<ChakraProtoMsg::Node>& nodes, uint64_t id) {
  for (const auto& n : nodes)
    if (n.id() == id) return n;
  throw std::runtime_error("no node " + std::to_string(id));
}

bool depends_on(const ChakraProtoMsg::Node& n, uint64_t id) {
  return std::find(n.data_deps().begin(), n.data_deps().end(), id) != n.data_deps().end();
}

TEST(DefaultMode, SyncDepsBecomeDataDepsWhenTheTargetStartsEarlier) {
  TempDir td;
  test::write_file(td.file("t.json"), sync_trace());
  std::vector<std::string> warnings;
  ConvertStats st = convert(td.file("t.json"), td.file("d.et"), quiet(false, &warnings));
  EXPECT_EQ(st.sync_deps, 1u);
  EXPECT_EQ(st.sync_deps_not_earlier, 1u);
  EXPECT_EQ(st.sync_deps_missing, 1u);
  EXPECT_EQ(st.sync_deps_cyclic, 1u);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("3 of 4 sync_dep entries not turned into data deps (1 name no written node, 1 do not "
                             "start before the waiting node, 1 would close a cycle)"),
            std::string::npos)
      << warnings[0];
  auto d = read_nodes(td.file("d.et"));
  EXPECT_TRUE(depends_on(node_by_id(d, 5), 4));
  EXPECT_FALSE(depends_on(node_by_id(d, 6), 4)) << "same start as the kernel: not earlier";
  EXPECT_FALSE(depends_on(node_by_id(d, 7), 99));
  EXPECT_TRUE(depends_on(node_by_id(d, 9), 8)) << "the per-thread chain";
  EXPECT_FALSE(depends_on(node_by_id(d, 8), 10)) << "8 -> 10 -> 9 -> 8 would be a cycle";

  // compat mode: the reference's behaviour, no sync edges and no warning
  warnings.clear();
  st = convert(td.file("t.json"), td.file("c.et"), quiet(true, &warnings));
  EXPECT_EQ(st.sync_deps + st.sync_deps_missing + st.sync_deps_not_earlier + st.sync_deps_cyclic, 0u);
  EXPECT_TRUE(warnings.empty());
  EXPECT_FALSE(depends_on(node_by_id(read_nodes(td.file("c.et")), 5), 4));
}

TEST(DefaultMode, WritesStartTimesWhereTheInputHasThem) {
  TempDir td;
  test::write_file(td.file("t.json"), sync_trace());
  convert(td.file("t.json"), td.file("d.et"), quiet(false));
  convert(td.file("t.json"), td.file("c.et"), quiet(true));
  auto d = read_nodes(td.file("d.et"));
  EXPECT_EQ(node_by_id(d, 2).start_time_micros(), 0u) << "no ts in the input";
  EXPECT_EQ(node_by_id(d, 3).start_time_micros(), 10u);
  EXPECT_EQ(node_by_id(d, 4).start_time_micros(), 12u) << "12.5 truncated, like exclusive_dur";
  EXPECT_EQ(node_by_id(d, 10).start_time_micros(), 47u);
  for (const auto& n : read_nodes(td.file("c.et"))) EXPECT_EQ(n.start_time_micros(), 0u) << "the reference writes none";
}

TEST(Converter, CommSizeSumsGenericListTensorsAndSkipsOutputs) {
  TempDir td;
  std::string in =
      R"J({"values": [[[1, 2, 0, 10, 4, "cuda:0"], [3, 4, 0, 6, 2, "cuda:0"]], 5, [7, 8, 0, 3, 8, "cuda:0"]],)J"
      R"J( "shapes": [[[10], [6]], [], [3]], "types": ["GenericList[Tensor(float),Tensor(half)]", "Int", "Tensor(double)"]})J";
  std::string t = et_trace(
      et_node(0, "[pytorch|profiler|execution_trace|process]", "0") + ", " +
      et_node(1, "[pytorch|profiler|execution_trace|thread]", "0") + ", " + et_node(2, "nccl:all_gather", "1", "", in) +
      ", " + et_node(3, "ncclDevKernel_AllGather_RING_LL", "2", R"J("cat": "kernel", "stream": 20)J", in));
  test::write_file(td.file("t.json"), t);
  convert(td.file("t.json"), td.file("d.et"), quiet(true));
  const auto k = read_nodes(td.file("d.et")).back();
  EXPECT_EQ(attr(k, "comm_type")->int64_val(), ChakraProtoMsg::ALL_GATHER);
  EXPECT_EQ(attr(k, "comm_size")->int64_val(), 10 * 4 + 6 * 2 + 3 * 8);
  EXPECT_EQ(k.inputs().values(),
            "[[[1, 2, 0, 10, 4, 'cuda:0'], [3, 4, 0, 6, 2, 'cuda:0']], 5, [7, 8, 0, 3, 8, 'cuda:0']]");
}

TEST(Converter, DataDepsFollowPreOrderChainAndGpuNodesHangOffTheirLauncher) {
  TempDir td;
  // 1 thread root; 2 parent of 3 and 4; GPU 5 launched by 3; 6 after 2's subtree
  std::string t =
      et_trace(et_node(0, "[pytorch|profiler|execution_trace|process]", "0") + ", " +
               et_node(1, "[pytorch|profiler|execution_trace|thread]", "0") + ", " + et_node(2, "outer", "1") + ", " +
               et_node(3, "launch", "2") + ", " + et_node(5, "kernel_a", "3", R"J("cat": "kernel", "stream": 7)J") +
               ", " + et_node(4, "inner2", "2") + ", " + et_node(6, "next", "1"));
  test::write_file(td.file("t.json"), t);
  convert(td.file("t.json"), td.file("d.et"), quiet(false));
  std::map<uint64_t, std::vector<uint64_t>> deps;
  for (const auto& n : read_nodes(td.file("d.et"))) deps[n.id()] = {n.data_deps().begin(), n.data_deps().end()};
  EXPECT_EQ(deps.count(0), 0u) << "process root is dangling and removed";
  EXPECT_EQ(deps[1], std::vector<uint64_t>{});
  EXPECT_EQ(deps[2], std::vector<uint64_t>{1});
  EXPECT_EQ(deps[3], std::vector<uint64_t>{2});
  EXPECT_EQ(deps[5], std::vector<uint64_t>{3});
  EXPECT_EQ(deps[4], std::vector<uint64_t>{3});
  EXPECT_EQ(deps[6], std::vector<uint64_t>{4});
}

// ---- validator and simulator semantics

TEST(Validator, ReportsTheCycleWithIdsAndNames) {
  std::vector<EtNode> g(3);
  g[0].id = 1, g[0].name = "a", g[0].data_deps = {3};
  g[1].id = 2, g[1].name = "b", g[1].data_deps = {1};
  g[2].id = 3, g[2].name = "c", g[2].data_deps = {2};
  auto issues = validate_graph(g);
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_NE(issues[0].problem.find("1 (a) -> 3 (c) -> 2 (b) -> 1 (a)"), std::string::npos) << issues[0].problem;
}

TEST(Validator, DeepChainNeedsNoRecursion) {
  std::vector<EtNode> g(1'000'000);
  for (size_t i = 0; i < g.size(); ++i) {
    g[i].id = i;
    g[i].name = "n";
    if (i) g[i].data_deps = {i - 1};
  }
  std::reverse(g.begin(), g.end());  // worst order for a DFS from the first node
  EXPECT_TRUE(validate_graph(g).empty());
}

TEST(Simulator, ReleasesAtIssueOneCpuStreamsInParallel) {
  std::vector<EtNode> g(4);
  g[0] = {1, "A", {}, {}, 3, true, true, 0, true, 1};
  g[1] = {2, "B", {1}, {}, 0, true, true, 0, true, 1};
  g[2] = {3, "G", {1}, {}, 5, false, true, 7, true, 1};
  g[3] = {4, "C", {2}, {}, 2, true, true, 0, true, 1};
  std::vector<std::string> lines;
  auto r = simulate(g, [&](const std::string& l) { lines.push_back(l); });
  // worked out by hand from docs/chakra.md §3.10
  std::vector<std::string> want = {
      "Issuing CPU Node ID 1 (A) at 0us with duration 3us, tid: 1",
      "Issuing GPU Node ID 3 (G) at 1us on stream 7 with duration 5us, tid: stream 7",
      "CPU Node ID 1 completed at 3us, tid: 1",
      "Issuing CPU Node ID 2 (B) at 3us with duration 0us, tid: 1",
      "CPU Node ID 2 completed at 4us, tid: 1",
      "Issuing CPU Node ID 4 (C) at 4us with duration 2us, tid: 1",
      "CPU Node ID 4 completed at 6us, tid: 1",
      "GPU Node ID 3 on stream 7 completed at 6us, tid: stream 7",
      "Simulation of Chakra node execution completed.",
  };
  EXPECT_EQ(lines, want);
  EXPECT_EQ(r.makespan, 6u);
}

TEST(Simulator, CostDoesNotGrowWithSimulatedTime) {
  std::vector<EtNode> g(3);
  g[0] = {1, "A", {}, {}, 1'000'000'000'000ull, true, true, 0, true, 1};
  g[1] = {2, "G", {1}, {}, 5'000'000'000'000ull, false, true, 7, true, 1};
  g[2] = {3, "B", {1}, {}, 1, true, true, 0, true, 1};
  size_t n = 0;
  auto r = simulate(g, [&](const std::string&) { ++n; });  // a per-µs loop would never finish
  EXPECT_EQ(r.makespan, 5'000'000'000'001ull);
  EXPECT_EQ(r.issued, 3u);
  EXPECT_EQ(n, 7u);
}

}  // namespace
}  // namespace opf::chakra
