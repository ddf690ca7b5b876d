// Malformed inputs: each must give one InputError line naming the file, the position or node,
// and the problem; no output file; no crash. The last tests go through the real `opforge` binary.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <sys/wait.h>

#include "converter.h"
#include "input_error.h"
#include "jsonizer.h"
#include "test_util.h"

namespace opf::chakra {
namespace {

using test::et_node;
using test::et_trace;
using test::TempDir;

std::string gzip(const std::string& s) {
  TempDir td;
  gzFile g = gzopen(td.file("x.gz").c_str(), "wb");
  gzwrite(g, s.data(), unsigned(s.size()));
  gzclose(g);
  return test::read_file(td.file("x.gz"));
}

const std::string kProc = et_node(1, "[pytorch|profiler|execution_trace|process]", "1");
const std::string kThread = et_node(2, "[pytorch|profiler|execution_trace|thread]", "1");

struct BadCase {
  std::string name;
  std::string content;
  std::string expect;  // substring of the message (the problem)
  std::string where;   // substring naming the position / node
  bool compat = false;
  bool is_et = false;  // jsonize an .et instead of converting JSON
  std::string file = "in.json";
};

std::vector<BadCase> bad_cases() {
  std::string good = et_trace(test::small_host_nodes());
  std::string good_gz = gzip(good);
  std::string corrupt_gz = good_gz;
  for (size_t i = 20; i < 40 && i < corrupt_gz.size(); ++i) corrupt_gz[i] = char(corrupt_gz[i] ^ 0x5a);
  // a valid .et to cut short
  std::string et;
  et.push_back(char(0x02));
  et += std::string("\x0a\x00", 2);  // GlobalMetadata{version:""} (2 bytes)
  et.push_back(char(10));
  et += std::string("\x08\x05\x12\x06", 4) + "abcdef";  // Node{id:5,name:"abcdef"} (10 bytes)
  std::string itd_cycle =
      et_trace(kProc + ", " + kThread + ", " + et_node(3, "a1", "2", "\"inter_thread_dep\": 12") + ", " +
               et_node(4, "a2", "2") + ", " + et_node(10, "[pytorch|profiler|execution_trace|thread]", "1") + ", " +
               et_node(11, "b1", "10", "\"inter_thread_dep\": 4", R"J({"values": [], "shapes": [], "types": []})J", 2) +
               ", " + et_node(12, "b2", "10", "", R"J({"values": [], "shapes": [], "types": []})J", 2));
  return {
      {"empty_file", "", "empty file", "byte 0"},
      {"whitespace_only", " \n\t ", "empty file", "byte 4"},
      {"not_json", "hello world", "expected '{'", "byte 0"},
      {"truncated_json", good.substr(0, good.size() / 2), "truncated", "byte "},
      {"truncated_after_nodes", good.substr(0, good.rfind(']') + 1), "end of input", "byte "},
      {"trailing_garbage", good + " }", "unexpected data after the end", "byte "},
      {"wrong_schema", et_trace(test::small_host_nodes(), "2.0.0"), "unsupported schema version '2.0.0'", "schema"},
      {"schema_1_0_1_in_compat", et_trace(test::small_host_nodes(), "1.0.1"), "unsupported schema version '1.0.1'",
       "schema", true},
      {"missing_schema", "{\"pid\": 1, \"nodes\": [" + test::small_host_nodes() + "]}", "missing schema", "byte "},
      {"missing_finish_ts",
       "{\"schema\": \"1.0.2-chakra.0.0.4\", \"pid\": 7, \"time\": \"t\", \"start_ts\": 1, \"nodes\": [" +
           test::small_host_nodes() + "]}",
       "missing metadata key \"finish_ts\"", "top level"},
      {"nodes_not_array", "{\"schema\": \"1.0.2-chakra.0.0.4\", \"nodes\": {}}", "must be an array", "byte "},
      {"node_not_object", et_trace(kProc + ", 42"), "must be a JSON object", "nodes[1]"},
      {"duplicate_ids", et_trace(test::small_host_nodes() + ", " + et_node(3, "again", "2")), "duplicate node id",
       "node 3"},
      {"dep_on_missing_id", et_trace(kProc + ", " + kThread + ", " + et_node(3, "x", "2", "\"inter_thread_dep\": 999")),
       "missing node 999", "node 3"},
      {"cycle", itd_cycle, "dependency cycle", "node "},
      {"negative_duration", et_trace(kProc + ", " + kThread + ", " + et_node(3, "x", "2", "\"exclusive_dur\": -5.5")),
       "negative exclusive_dur", "node 3"},
      {"huge_integer_id", et_trace(kProc + ", " + "{\"id\": 123456789012345678901234567890, \"name\": \"x\"}"),
       "beyond 64 bits", "nodes[1]"},
      {"string_id", et_trace(kProc + ", " + et_node(3, "x", "2").replace(7, 1, "\"3\"")), "must be an integer",
       "nodes[1]"},
      {"negative_id", et_trace(kProc + ", " + et_node(-3, "x", "2")), "negative node id", "id -3"},
      {"missing_id", et_trace(kProc + ", {\"name\": \"x\", \"ctrl_deps\": 1}"), "lacks required key \"id\"",
       "nodes[1]"},
      {"missing_attr",
       et_trace(
           kProc + ", " + kThread + ", {\"id\": 3, \"name\": \"x\", \"ctrl_deps\": 2, " +
           R"J("inputs": {"values": [], "shapes": [], "types": []}, "outputs": {"values": [], "shapes": [], "types": []}, "attrs": []})J"),
       "missing attribute 'rf_id'", "node 3"},
      {"non_utf8_name", et_trace(kProc + ", " + kThread + ", " + et_node(3, "bad\xff\xfename", "2")), "UTF-8",
       "nodes[2]"},
      {"bad_escape", et_trace(kProc + ", " + kThread + ", " + et_node(3, "bad\\qescape", "2")), "invalid string",
       "nodes[2]"},
      {"corrupt_gzip", corrupt_gz, "gzip", "byte ", false, false, "in.json.gz"},
      {"truncated_gzip", good_gz.substr(0, good_gz.size() - 30), "truncated gzip", "byte ", false, false, "in.json.gz"},
      {"unknown_nccl_compat",
       et_trace(kProc + ", " + kThread + ", " + et_node(3, "nccl:x", "2") + ", " +
                et_node(4, "ncclDevKernel_Generic", "3", "\"cat\": \"kernel\", \"stream\": 3")),
       "collective communication type", "node 4", true},
      {"truncated_et", et.substr(0, et.size() - 3), "truncated record", "record 1", false, true, "in.et"},
      {"truncated_et_varint", et.substr(0, 3) + "\x80", "truncated length prefix", "record 1", false, true, "in.et"},
      {"garbage_et", std::string("\x05\xff\xff\xff\xff\xff", 6), "not a valid", "record 0", false, true, "in.et"},
      {"empty_gzip_member_then_garbage", good_gz + "XY", "trailing garbage", "byte ", false, false, "in.json.gz"},
  };
}

class BadInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadInput, OneLineErrorNamingFilePositionProblemAndNoOutput) {
  const BadCase& c = GetParam();
  TempDir td;
  std::string in = td.file(c.file), out = td.file(c.is_et ? "out.json" : "out.et");
  test::write_file(in, c.content);
  std::string msg;
  try {
    if (c.is_et) {
      jsonize(in, out, c.compat);
    } else {
      ConvertOptions o;
      o.compat_reference = c.compat;
      o.warn = [](const std::string&) {};
      convert(in, out, o);
    }
  } catch (const InputError& e) {
    msg = e.what();
  }
  ASSERT_FALSE(msg.empty()) << c.name << ": no error";
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_EQ(msg.rfind(in, 0), 0u) << "message must start with the file name: " << msg;
  EXPECT_NE(msg.find(c.expect), std::string::npos) << "problem: " << msg;
  EXPECT_NE(msg.find(c.where), std::string::npos) << "position: " << msg;
  EXPECT_FALSE(test::exists(out)) << "output written despite the error";
  // nothing else (temp files) left next to the output
  EXPECT_EQ(std::system(("test $(ls -A '" + td.path() + "' | wc -l) -eq 1").c_str()), 0)
      << "stray files in " << td.path();
}

INSTANTIATE_TEST_SUITE_P(Chakra, BadInput, ::testing::ValuesIn(bad_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(BadInput, CountIsAtLeastEighteen) { EXPECT_GE(bad_cases().size(), 18u); }

// ---- through the real CLI binary

struct CliRun {
  int rc;
  std::string err;
};

CliRun run_cli(const std::string& args) {
  const char* bin = std::getenv("OPFORGE_EXE");
  std::string cmd = std::string(bin) + " " + args + " 2>&1 >/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128, out};
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::getenv("OPFORGE_EXE")) GTEST_SKIP() << "OPFORGE_EXE (path of the opforge binary) not set";
  }
};

TEST_F(Cli, TruncatedJsonFailsWithOneLineAndNoOutput) {
  TempDir td;
  std::string good = et_trace(test::small_host_nodes());
  test::write_file(td.file("t.json"), good.substr(0, good.size() - 40));
  CliRun r = run_cli("chakra convert " + td.file("t.json") + " " + td.file("o.et"));
  EXPECT_NE(r.rc, 0);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(td.file("t.json") + ": byte "), std::string::npos) << r.err;
  EXPECT_FALSE(test::exists(td.file("o.et")));
}

TEST_F(Cli, CycleFailsAndKeepsAnExistingOutputUntouched) {
  TempDir td;
  std::string t = et_trace(kProc + ", " + kThread + ", " + et_node(3, "x", "2", "\"inter_thread_dep\": 4") + ", " +
                           et_node(4, "y", "2"));
  test::write_file(td.file("t.json"), t);
  test::write_file(td.file("o.et"), "precious");
  CliRun r = run_cli("chakra convert " + td.file("t.json") + " " + td.file("o.et"));
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("dependency cycle"), std::string::npos) << r.err;
  EXPECT_EQ(test::read_file(td.file("o.et")), "precious");
}

TEST_F(Cli, TruncatedEtFailsInJsonizeValidateAndSimulate) {
  TempDir td;
  test::write_file(td.file("t.et"), std::string("\x02\x0a\x00\x0a\x08\x05", 6));
  for (const char* sub : {"jsonize", "validate", "simulate"}) {
    std::string args = std::string("chakra ") + sub + " " + td.file("t.et");
    if (std::string(sub) == "jsonize") args += " " + td.file("o.json");
    CliRun r = run_cli(args);
    EXPECT_NE(r.rc, 0) << sub;
    EXPECT_NE(r.err.find("truncated record"), std::string::npos) << sub << ": " << r.err;
  }
  EXPECT_FALSE(test::exists(td.file("o.json")));
}

TEST_F(Cli, ParallelConvertReportsEachBadPairAndWritesTheGoodOnes) {
  TempDir td;
  test::write_file(td.file("good.json"), et_trace(test::small_host_nodes()));
  test::write_file(td.file("bad.json"), "{");
  CliRun r = run_cli("chakra convert -j 2 " + td.file("good.json") + " " + td.file("g.et") + " " + td.file("bad.json") +
                     " " + td.file("b.et"));
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find(td.file("bad.json")), std::string::npos) << r.err;
  EXPECT_TRUE(test::exists(td.file("g.et")));
  EXPECT_FALSE(test::exists(td.file("b.et")));
}

}  // namespace
}  // namespace opf::chakra
