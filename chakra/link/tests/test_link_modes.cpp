// Where default mode deliberately differs from --compat reference, on a small hand-made pair:
// the narrow sync dependency (a kernel waited for by cudaStreamSynchronize -> the next CPU op)
// lands on the right node (the reference looks the new id up again as an original id), and
// parents that are not nodes become null instead of freshly minted ids. Also: linking then
// converting in compat mode reproduces the reference .et byte for byte.
#include <gtest/gtest.h>

#include "converter.h"
#include "link_test_util.h"
#include "trace_linker.h"

namespace opf::chakra {
namespace {

std::string node(int id, const char* name, const char* parent, int rf) {
  return std::string(R"({"id": )") + std::to_string(id) + R"(, "name": ")" + name + R"(", "ctrl_deps": )" + parent +
         R"(, "inputs": {"values": [], "shapes": [], "types": []}, "outputs": {"values": [], "shapes": [], "types": []}, "attrs": [{"name": "rf_id", "type": "uint64", "value": )" +
         std::to_string(rf) + R"(}, {"name": "tid", "type": "uint64", "value": 1}]})";
}

const std::string kHost = R"({"schema": "1.0.2-chakra.0.0.4", "pid": 1, "time": "t", "start_ts": 0, "nodes": [)" +
                          node(2, "[pytorch|profiler|execution_trace|thread]", "1", 0) + ",\n" +
                          node(3, "aten::after_sync", "2", 11) + ",\n" + node(4, "aten::launch", "2", 5) + ",\n" +
                          node(5, "aten::_local_scalar_dense", "2", 10) + ",\n" + node(6, "orphan", "99", 12) + ",\n" +
                          node(8, "parentless", "null", 13) + ",\n" +
                          node(1, "[pytorch|profiler|execution_trace|process]", "1", 0) + R"(], "finish_ts": 9})";

const std::string kKineto = R"({"traceEvents": [
{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "tid": 7, "ts": 0, "dur": 1000, "args": {"External id": 1}},
{"ph": "X", "cat": "cpu_op", "name": "aten::launch", "tid": 7, "ts": 10, "dur": 20, "args": {"External id": 5, "Record function id": 5}},
{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "tid": 7, "ts": 12, "dur": 3, "args": {"External id": 5, "correlation": 1}},
{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 70, "ts": 20, "dur": 50, "args": {"External id": 5, "correlation": 1, "stream": 7}},
{"ph": "X", "cat": "cpu_op", "name": "aten::_local_scalar_dense", "tid": 7, "ts": 40, "dur": 50, "args": {"External id": 10, "Record function id": 10}},
{"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "tid": 7, "ts": 45, "dur": 40, "args": {"External id": 10, "correlation": 2}},
{"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 70, "ts": 80, "dur": 0, "args": {"correlation": 2, "stream": 7}},
{"ph": "X", "cat": "cpu_op", "name": "aten::after_sync", "tid": 7, "ts": 100, "dur": 5, "args": {"External id": 11, "Record function id": 11}},
{"ph": "X", "cat": "cpu_op", "name": "orphan", "tid": 7, "ts": 200, "dur": 5, "args": {"External id": 12, "Record function id": 12}},
{"ph": "X", "cat": "cpu_op", "name": "parentless", "tid": 7, "ts": 300, "dur": 5, "args": {"External id": 13, "Record function id": 13}}
]})";

struct Out {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  simdjson::dom::element by_name(std::string_view name) {
    for (auto n : doc["nodes"].get_array())
      if (std::string_view(n["name"]) == name) return n;
    ADD_FAILURE() << "no node " << name;
    return {};
  }
};

// A host ET + Kineto pair written to a scratch dir and linked; the dir goes with the object.
struct Linked {
  std::filesystem::path dir;
  LinkStats st;
  Out out;
  Linked(const std::string& tag, const std::string& host, const std::string& kineto, bool compat)
      : dir(test::scratch_dir(tag + (compat ? "_compat" : "_default"))) {
    test::write_text(dir / "host.json", host);
    test::write_text(dir / "kineto.json", kineto);
    LinkOptions o;
    o.host_path = (dir / "host.json").string();
    o.kineto_path = (dir / "kineto.json").string();
    o.output_path = output();
    o.compat_reference = compat;
    st = link_traces(o);
    if (out.parser.parse(test::read_text(o.output_path)).get(out.doc)) ADD_FAILURE() << "linked output is not JSON";
  }
  ~Linked() { std::filesystem::remove_all(dir); }
  std::string output() const { return (dir / "out.json").string(); }
};

void link(bool compat, Out& out) {
  Linked l("modes", kHost, kKineto, compat);
  EXPECT_EQ(l.st.matched, compat ? 3u : 5u) << "the reference links only the process root's subtree";
  EXPECT_EQ(l.st.gpu_nodes_emitted, 1u);
  EXPECT_EQ(l.st.sync_dep_nodes, 1u);
  ASSERT_FALSE(out.parser.parse(test::read_text(l.output())).get(out.doc));
}

TEST(LinkModes, SyncDepLandsOnTheWaitingOpByDefault) {
  Out out;
  link(false, out);
  // ids: process 0, thread 1, after_sync 2, launch 3, kernel 4, _local_scalar_dense 5, ...
  EXPECT_EQ(int64_t(out.by_name("k")["id"]), 4);
  simdjson::dom::array deps;
  ASSERT_FALSE(out.by_name("aten::after_sync")["sync_dep"].get(deps));
  ASSERT_EQ(deps.size(), 1u);
  EXPECT_EQ(int64_t(deps.at(0)), 4);
  EXPECT_TRUE(out.by_name("[pytorch|profiler|execution_trace|thread]")["sync_dep"].error());
}

// Linked then converted (default modes): the sync dep reaches the converter, which accounts for it.
// Here it cannot become an edge: the host ET numbers after_sync (ts 100) before the launch of the
// kernel it waits for, so the per-thread chain already orders after_sync -> launch -> kernel and
// the edge would close a cycle; the conversion goes on without it instead of failing.
TEST(LinkModes, ConvertAccountsForTheLinkedSyncDep) {
  // kHost with every attribute the converter requires
  std::string host = kHost;
  const std::string tid = R"({"name": "tid", "type": "uint64", "value": 1})";
  for (size_t at = host.find(tid); at != std::string::npos; at = host.find(tid, at + 1))
    host.insert(
        at, R"({"name": "fw_parent", "type": "uint64", "value": 0}, {"name": "seq_id", "type": "int64", "value": -1}, )"
            R"({"name": "scope", "type": "uint64", "value": 0}, {"name": "fw_tid", "type": "uint64", "value": 0}, )"
            R"({"name": "op_schema", "type": "string", "value": ""}, )"),
        at = host.find(tid, at);
  Linked l("modes_convert", host, kKineto, false);
  ASSERT_EQ(l.st.sync_dep_nodes, 1u);
  ConvertOptions co;
  std::vector<std::string> warnings;
  co.warn = [&](const std::string& w) { warnings.push_back(w); };
  ConvertStats st;
  ASSERT_NO_THROW(st = convert(l.output(), (l.dir / "out.et").string(), co));
  EXPECT_EQ(st.sync_deps, 0u);
  EXPECT_EQ(st.sync_deps_cyclic, 1u);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("1 would close a cycle"), std::string::npos) << warnings[0];
}

TEST(LinkModes, CompatReproducesTheDoubleLookup) {
  Out out;
  link(true, out);
  // the reference looks the new id 2 up as an original id: 2 is the thread root (new id 1)
  simdjson::dom::array deps;
  ASSERT_FALSE(out.by_name("[pytorch|profiler|execution_trace|thread]")["sync_dep"].get(deps));
  EXPECT_EQ(int64_t(deps.at(0)), 4);
  EXPECT_TRUE(out.by_name("aten::after_sync")["sync_dep"].error());
}

TEST(LinkModes, ParentsThatAreNotNodes) {
  Out d, c;
  link(false, d);
  link(true, c);
  EXPECT_TRUE(d.by_name("orphan")["ctrl_deps"].is_null());
  EXPECT_TRUE(d.by_name("parentless")["ctrl_deps"].is_null());
  // reference: fresh ids after the last id (7 host nodes + 1 GPU copy: 0..7), in node order;
  // a null parent gets one too
  EXPECT_EQ(int64_t(c.by_name("orphan")["ctrl_deps"]), 8);
  EXPECT_EQ(int64_t(c.by_name("parentless")["ctrl_deps"]), 9);
  // the orphan is not under the process root: the reference does not link it
  EXPECT_TRUE(c.by_name("orphan")["ts"].error());
  EXPECT_FALSE(d.by_name("orphan")["ts"].error());
}

// Integer-microsecond Kineto (PyTorch < 2.0 style): a child that starts with its parent is
// subtracted from it by default but not in compat (the reference's tie quirk). Also a HIP
// launch and a string tid.
TEST(LinkModes, EqualStartTieAndHipLaunch) {
  const std::string host =
      std::string(R"({"schema": "1.0.2-chakra.0.0.4", "pid": 1, "time": "t", "start_ts": 0, "nodes": [)") +
      node(2, "[pytorch|profiler|execution_trace|thread]", "1", 0) + ",\n" + node(3, "parent", "2", 1) + ",\n" +
      node(4, "child", "3", 2) + ",\n" + node(1, "[pytorch|profiler|execution_trace|process]", "1", 0) +
      R"(], "finish_ts": 9})";
  const std::string kineto = R"({"traceEvents": [
{"ph": "X", "cat": "cpu_op", "name": "parent", "tid": "main", "ts": 100, "dur": 10, "args": {"External id": 1, "Record function id": 1}},
{"ph": "X", "cat": "cpu_op", "name": "child", "tid": "main", "ts": 100, "dur": 4, "args": {"External id": 2, "Record function id": 2}},
{"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "tid": "main", "ts": 101, "dur": 2, "args": {"External id": 2, "correlation": 9}},
{"ph": "X", "cat": "kernel", "name": "hip_k", "tid": 3, "ts": 105, "dur": 7, "args": {"External id": 2, "correlation": 9, "stream": 3}}
]})";
  for (bool compat : {false, true}) {
    Linked l("tie", host, kineto, compat);
    EXPECT_EQ(l.st.gpu_nodes_emitted, 1u);
    Out& out = l.out;
    simdjson::dom::element excl = out.by_name("parent")["exclusive_dur"];
    ASSERT_TRUE(excl.is_int64()) << "integer inputs give integer durations, as in Python";
    EXPECT_EQ(int64_t(excl), compat ? 10 : 6);
    EXPECT_EQ(int64_t(out.by_name("child")["exclusive_dur"]), 4);
    // the kernel hangs off the child (same tid + External id) and sits right after it
    EXPECT_EQ(int64_t(out.by_name("hip_k")["ctrl_deps"]), int64_t(out.by_name("child")["id"]));
    EXPECT_EQ(int64_t(out.by_name("hip_k")["id"]), int64_t(out.by_name("child")["id"]) + 1);
  }
}

// Kineto ops recorded while the ET observer was off carry `Record function id: 0`; the reference
// pairs every host node with rf_id 0 with the last of them (last writer wins, docs/chakra.md §4.1/§8).
TEST(LinkModes, RecordFunctionIdZeroMatchesNothingByDefault) {
  const std::string host =
      std::string(R"({"schema": "1.0.2-chakra.0.0.4", "pid": 1, "time": "t", "start_ts": 0, "nodes": [)") +
      node(2, "[pytorch|profiler|execution_trace|thread]", "1", 0) + ",\n" + node(3, "aten::a", "2", 5) + ",\n" +
      node(4, "aten::b", "2", 0) + ",\n" + node(1, "[pytorch|profiler|execution_trace|process]", "1", 0) +
      R"(], "finish_ts": 9})";
  const std::string kineto = R"({"traceEvents": [
{"ph": "X", "cat": "cpu_op", "name": "aten::a", "tid": 7, "ts": 10, "dur": 5, "args": {"External id": 1, "Record function id": 5}},
{"ph": "X", "cat": "cpu_op", "name": "aten::x", "tid": 7, "ts": 20, "dur": 5, "args": {"External id": 2, "Record function id": 0}},
{"ph": "X", "cat": "cpu_op", "name": "aten::y", "tid": 7, "ts": 30, "dur": 5, "args": {"External id": 3, "Record function id": 0}}
]})";
  for (bool compat : {false, true}) {
    Linked l("rf0", host, kineto, compat);
    const LinkStats& st = l.st;
    Out& out = l.out;
    EXPECT_EQ(int64_t(out.by_name("aten::a")["ts"]), 10);
    if (compat) {
      EXPECT_EQ(st.matched, 4u) << "a, b and both roots";
      EXPECT_EQ(int64_t(out.by_name("aten::b")["ts"]), 30) << "the last op with rf_id 0";
      EXPECT_EQ(int64_t(out.by_name("[pytorch|profiler|execution_trace|thread]")["ts"]), 30);
    } else {
      EXPECT_EQ(st.matched, 1u);
      EXPECT_TRUE(out.by_name("aten::b")["ts"].error());
      EXPECT_TRUE(out.by_name("[pytorch|profiler|execution_trace|thread]")["ts"].error());
    }
  }
}

TEST(LinkModes, LinkThenConvertReproducesReferenceEt) {
  const std::string dir = test::traces_dir();
  auto scratch = test::scratch_dir("link_convert");
  struct {
    const char *host, *kineto, *et;
  } cases[] = {{"mlcommons-chakra/host_et_1.0.2-chakra.0.0.4.json.gz", "synthetic-linked/c102_kineto_synth.json.gz",
                "synthetic-linked/c102_linked.ref.et.gz"},
               {"facebookresearch-param/resnet_et.json.gz", "synthetic-linked/resnet_kineto_synth.json.gz",
                "synthetic-linked/resnet_linked.ref.et.gz"}};
  for (auto& c : cases) {
    LinkOptions o;
    o.host_path = dir + "/" + c.host;
    o.kineto_path = dir + "/" + c.kineto;
    o.output_path = (scratch / "linked.json").string();
    o.compat_reference = true;
    link_traces(o);
    ConvertOptions co;
    co.compat_reference = true;
    co.warn = [](const std::string&) {};
    convert(o.output_path, (scratch / "out.et").string(), co);
    EXPECT_TRUE(test::read_text(scratch / "out.et") == test::read_text(dir + "/" + c.et)) << c.et;
  }
  std::filesystem::remove_all(scratch);
}

}  // namespace
}  // namespace opf::chakra
