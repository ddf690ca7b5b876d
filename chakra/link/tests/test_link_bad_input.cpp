// Malformed Kineto / host inputs: each must fail with one line that names the file, where
// (event number, byte offset, node) and what is wrong, and leave no output file behind (an
// existing file at the output path is left untouched).
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "input_error.h"
#include "link_test_util.h"
#include "trace_linker.h"

namespace opf::chakra {
namespace {

const char* kHost = R"({"schema": "1.0.2-chakra.0.0.4", "pid": 1, "time": "t", "start_ts": 0, "nodes": [
 {"id": 2, "name": "[pytorch|profiler|execution_trace|thread]", "ctrl_deps": 1, "inputs": {"values": [], "shapes": [], "types": []}, "outputs": {"values": [], "shapes": [], "types": []}, "attrs": [{"name": "rf_id", "type": "uint64", "value": 0}]},
 {"id": 3, "name": "aten::mul", "ctrl_deps": 2, "inputs": {"values": [], "shapes": [], "types": []}, "outputs": {"values": [], "shapes": [], "types": []}, "attrs": [{"name": "rf_id", "type": "uint64", "value": 5}]},
 {"id": 1, "name": "[pytorch|profiler|execution_trace|process]", "ctrl_deps": 1, "inputs": {"values": [], "shapes": [], "types": []}, "outputs": {"values": [], "shapes": [], "types": []}, "attrs": [{"name": "rf_id", "type": "uint64", "value": 0}]}
], "finish_ts": 9})";

std::string kineto(const std::string& events) { return R"({"schemaVersion": 1, "traceEvents": [)" + events + "]}"; }
const std::string kCpu =
    R"({"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 7, "ts": 100.0, "dur": 10.0, "args": {"External id": 5, "Record function id": 5}})";
const std::string kLaunch1 =
    R"({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 7, "ts": 102.0, "dur": 3.0, "args": {"External id": 5, "correlation": 42}})";
const std::string kLaunch2 =
    R"({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 7, "ts": 106.0, "dur": 3.0, "args": {"External id": 5, "correlation": 42}})";

struct Bad {
  const char* name;
  std::string kineto_text;  // written as-is (see gz flags)
  bool gzip = false;
  bool corrupt_gz = false;
  std::string host_text = kHost;
  const char* expect_where;  // must appear in the message
  const char* expect_problem;
  bool host_is_bad = false;
};

class LinkBadInput : public ::testing::TestWithParam<Bad> {};

TEST_P(LinkBadInput, OneLineErrorAndNoOutput) {
  const Bad b = GetParam();
  auto dir = test::scratch_dir(std::string("bad_") + b.name);
  auto kpath = dir / (b.gzip || b.corrupt_gz ? "kineto.json.gz" : "kineto.json");
  auto hpath = dir / "host_et.json";
  if (b.corrupt_gz) {
    // a whole 10-byte gzip header (a literal would stop at its first \0), then no deflate stream
    std::string gz = std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", 10) + "this is not deflate data at all";
    test::write_text(kpath, gz);
  } else if (b.gzip) {
    test::write_gzip(kpath, b.kineto_text);
  } else {
    test::write_text(kpath, b.kineto_text);
  }
  test::write_text(hpath, b.host_text);
  auto out = dir / "linked.json";
  auto kept = dir / "kept.json";
  test::write_text(kept, "KEEP");
  for (const auto& target : {out, kept}) {
    LinkOptions o;
    o.host_path = hpath.string();
    o.kineto_path = kpath.string();
    o.output_path = target.string();
    try {
      link_traces(o);
      FAIL() << b.name << ": accepted";
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      const std::string file = b.host_is_bad ? hpath.string() : kpath.string();
      EXPECT_EQ(msg.rfind(file, 0), 0u) << "names the file first: " << msg;
      EXPECT_NE(msg.find(b.expect_where), std::string::npos) << "where: " << msg;
      EXPECT_NE(msg.find(b.expect_problem), std::string::npos) << "problem: " << msg;
    }
  }
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_EQ(test::read_text(kept), "KEEP");
  for (auto& e : std::filesystem::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << "temp file left: " << e.path();
  std::filesystem::remove_all(dir);
}

const std::string kGood = kineto(kCpu + "," + kLaunch1);

INSTANTIATE_TEST_SUITE_P(
    Malformed, LinkBadInput,
    ::testing::Values(
        Bad{"truncated_in_string", kGood.substr(0, kGood.size() / 2), false, false, kHost, "", "truncated"},
        Bad{"truncated_after_event", kGood.substr(0, kGood.find("},") + 2), false, false, kHost, "end of file",
            "truncated"},
        Bad{"not_json", "this is a text file, not JSON\n", false, false, kHost, "byte", "JSON"},
        Bad{"no_trace_events", R"({"schemaVersion": 1, "deviceProperties": []})", false, false, kHost, "",
            "traceEvents"},
        Bad{"trace_events_not_array", R"({"traceEvents": {"a": 1}})", false, false, kHost, "traceEvents",
            "not an array"},
        Bad{"event_not_object", kineto(kCpu + ", 17"), false, false, kHost, "event #1", "not a JSON object"},
        Bad{"duplicate_correlation", kineto(kCpu + "," + kLaunch1 + "," + kLaunch2), false, false, kHost, "event #2",
            "duplicate correlation id 42"},
        Bad{"negative_dur",
            kineto(R"({"ph": "X", "cat": "cpu_op", "name": "aten::mul", "tid": 7, "ts": 100, "dur": -5, "args": {}})"),
            false, false, kHost, "event #0", "negative \"dur\""},
        Bad{"corrupt_gz", "", false, true, kHost, "", "gzip"}, Bad{"empty", "", false, false, kHost, "", "empty file"},
        Bad{"huge_int",
            kineto(
                R"({"ph": "X", "cat": "cpu_op", "name": "x", "tid": 7, "ts": 123456789012345678901234567890, "dur": 1, "args": {}})"),
            false, false, kHost, "event #0", "64 bits"},
        Bad{"external_id_not_int",
            kineto(
                R"({"ph": "X", "cat": "cpu_op", "name": "x", "tid": 7, "ts": 1, "dur": 1, "args": {"External id": "abc"}})"),
            false, false, kHost, "event #0", "External id"},
        Bad{"ts_not_number",
            kineto(R"({"ph": "X", "cat": "kernel", "name": "k", "tid": 7, "ts": "soon", "dur": 1, "args": {}})"), false,
            false, kHost, "event #0", "\"ts\""},
        Bad{"host_truncated", kGood, false, false, std::string(kHost).substr(0, 300), "", "truncated", true},
        Bad{"host_truncated_after_node", kGood, false, false,
            std::string(kHost).substr(0, std::string(kHost).find("},\n {\"id\": 3") + 2), "end of file", "truncated",
            true},
        Bad{"host_no_nodes", kGood, false, false, R"({"schema": "1.0.2-chakra.0.0.4", "pid": 1})", "", "no \"nodes\"",
            true},
        Bad{"host_node_without_id", kGood, false, false, R"({"nodes": [{"name": "a"}]})", "node #0", "no \"id\"", true},
        Bad{"host_duplicate_id", kGood, false, false, R"({"nodes": [{"id": 4, "name": "a"}, {"id": 4, "name": "b"}]})",
            "node #1", "duplicate node id 4", true}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(LinkBadInputGzip, TruncatedGzipIsAnError) {
  auto dir = test::scratch_dir("bad_truncgz");
  auto full = dir / "full.json.gz";
  std::string big;
  for (int i = 0; i < 2000; ++i) big += (i ? "," : "") + kCpu;
  test::write_gzip(full, kineto(big));
  // cut the compressed file in half
  std::ifstream f(full, std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  test::write_text(dir / "cut.json.gz", raw.substr(0, raw.size() / 2));
  test::write_text(dir / "host.json", kHost);
  LinkOptions o;
  o.host_path = (dir / "host.json").string();
  o.kineto_path = (dir / "cut.json.gz").string();
  o.output_path = (dir / "out.json").string();
  try {
    link_traces(o);
    FAIL() << "accepted a truncated gzip file";
  } catch (const InputError& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind(o.kineto_path, 0), 0u) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos);
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "out.json"));
  std::filesystem::remove_all(dir);
}

TEST(LinkBadInputFiles, MissingInputFile) {
  auto dir = test::scratch_dir("bad_missing");
  LinkOptions o;
  o.host_path = (dir / "nope_host.json").string();
  o.kineto_path = (dir / "nope_kineto.json").string();
  o.output_path = (dir / "out.json").string();
  try {
    link_traces(o);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("nope_kineto.json"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "out.json"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace opf::chakra
