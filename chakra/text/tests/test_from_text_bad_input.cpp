// from-text on malformed workloads: one "FILE:LINE: problem" line, no file written, in the
// library and through the `opforge` binary (exit status 2). Also what compat mode accepts
// because the reference's Python int() does.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>

#include "input_error.h"
#include "text_test_util.h"

namespace opf::chakra {
namespace {

using test::TempDir;

const std::string kGood = "conv\t-1\t5\tNONE\t0\t6\tNONE\t0\t7\tALLREDUCE\t64\t1\n";
const std::string kDlrm =
    "HYBRID_DLRM 2\n4\n"
    "emb -1 1 ALLTOALL 8 1 ALLTOALL 8 1 NONE 0 1\n"
    "bot -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 1\n"
    "mid -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 1\n"
    "top -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 1\n";

std::string replace(std::string s, const std::string& from, const std::string& to) {
  size_t p = s.find(from);
  EXPECT_NE(p, std::string::npos) << from;
  return s.replace(p, from.size(), to);
}

struct BadText {
  std::string name;
  std::string text;
  std::string expect;  // what the message must contain after "FILE"
  bool compat = false;
};

std::vector<BadText> bad_texts() {
  return {
      {"empty_file", "", ": empty workload"},
      {"only_blank_lines", "\n \t\r\n\n", ": empty workload"},
      {"empty_file_compat", "", ":1: no parallelism type", true},
      {"unsupported_type", "HYBRID_CUSTOMIZED\n1\n" + kGood, ":1: unsupported parallelism type 'HYBRID_CUSTOMIZED'"},
      {"lower_case_type", "data\n1\n" + kGood, ":1: unsupported parallelism type 'data'"},
      {"missing_count", "DATA\n", ":2: missing layer count"},
      {"count_not_integer", "DATA\nsix\n" + kGood, ":2: layer count: 'six'"},
      {"count_not_integer_compat", "DATA\nsix\n" + kGood, ":2: layer count 'six' is not an integer", true},
      {"count_with_more", "DATA\n1 2\n" + kGood, ":2: expected the layer count alone"},
      {"no_layers", "DATA\n0\n", ":2: no layer lines"},
      {"too_few_columns", "DATA\n1\nconv -1 5 NONE 0 6 NONE 0 7 ALLREDUCE 64\n",
       ":3: a layer needs 12 whitespace-separated columns, found 11"},
      {"too_few_columns_compat", "DATA\n1\nconv -1 5 NONE 0\n", ":3: a layer needs 12", true},
      {"blank_layer_line_compat", "DATA\n1\n" + kGood + "\n", ":4: blank line where a layer is expected", true},
      {"not_a_number", "DATA\n1\n" + replace(kGood, "\t5\t", "\t5us\t"), ":3: column 3 (forward compute time): '5us'"},
      {"not_a_number_compat", "DATA\n1\n" + replace(kGood, "\t64\t", "\t6.4\t"),
       ":3: column 11 (weight-gradient comm size): '6.4' is not an integer", true},
      {"negative_time", "DATA\n1\n" + replace(kGood, "\t6\t", "\t-6\t"),
       ":3: column 6 (input-gradient compute time): '-6'"},
      {"plus_sign", "DATA\n1\n" + replace(kGood, "\t7\t", "\t+7\t"),
       ":3: column 9 (weight-gradient compute time): '+7'"},
      {"underscore_digits", "DATA\n1\n" + replace(kGood, "\t64\t", "\t6_4\t"),
       ":3: column 11 (weight-gradient comm size): '6_4'"},
      {"beyond_int64", "DATA\n1\n" + replace(kGood, "\t64\t", "\t9223372036854775808\t"), ":3: column 11"},
      {"beyond_int64_compat", "DATA\n1\n" + replace(kGood, "\t64\t", "\t9223372036854775808\t"),
       ":3: comm size 9223372036854775808 does not fit", true},
      {"negative_time_compat", "DATA\n1\n" + replace(kGood, "\t7\t", "\t-7\t"),
       ":3: BWD_WG compute time -7 does not fit", true},
      {"update_not_a_number", "DATA\n1\n" + replace(kGood, "\t1\n", "\tx\n"), ":3: column 12 (update time): 'x'"},
      {"unknown_comm_type", "DATA\n1\n" + replace(kGood, "ALLREDUCE", "ALLREDUC"),
       ":3: column 10 (weight-gradient comm type): unknown comm type 'ALLREDUC'"},
      {"duplicate_layer_name", "DATA\n2\n" + kGood + "\n" + kGood, ":5: layer name 'conv' is already used on line 3"},
      {"invalid_utf8", "DATA\n1\n" + replace(kGood, "conv", "c\xff"), ":3: not valid UTF-8"},
      {"invalid_utf8_compat", "DATA\r\n1\r\n" + replace(kGood, "conv", "c\xc0\x80"), ":3: not valid UTF-8", true},
      {"dlrm_missing_last_bottom", replace(kDlrm, "HYBRID_DLRM 2", "HYBRID_DLRM"),
       ":1: HYBRID_DLRM needs the last bottom layer"},
      {"dlrm_missing_last_bottom_compat", replace(kDlrm, "HYBRID_DLRM 2", "HYBRID_DLRM"),
       ":1: HYBRID_DLRM needs the last bottom layer", true},
      {"dlrm_last_bottom_zero", replace(kDlrm, "HYBRID_DLRM 2", "HYBRID_DLRM 0"),
       ":1: last bottom layer 0 must be between 1 and"},
      {"dlrm_last_bottom_zero_compat", replace(kDlrm, "HYBRID_DLRM 2", "HYBRID_DLRM 0"),
       ":3: the reference converter fails here", true},
      {"dlrm_last_bottom_too_large", replace(kDlrm, "HYBRID_DLRM 2", "HYBRID_DLRM 3"),
       ":1: last bottom layer 3 must be between 1 and"},
      {"dlrm_embedding_not_alltoall", replace(kDlrm, "1 ALLTOALL 8 1 ALLTOALL", "1 ALLREDUCE 8 1 ALLTOALL"),
       ":3: the embedding layer's forward comm must be ALLTOALL"},
      {"dlrm_embedding_not_alltoall_compat", replace(kDlrm, "1 ALLTOALL 8 1 ALLTOALL", "1 ALLREDUCE 8 1 ALLTOALL"),
       ":5: the reference converter fails here", true},
  };
}

class BadWorkload : public ::testing::TestWithParam<BadText> {};

TEST_P(BadWorkload, OneLineNamingFileLineAndProblemAndNoOutput) {
  const BadText& c = GetParam();
  TempDir td;
  std::string in = td.file("w.txt");
  test::write_file(in, c.text);
  std::string msg;
  try {
    test::run_from_text(in, td.file("out"), 2, 2, c.compat);
  } catch (const InputError& e) {
    msg = e.what();
  }
  ASSERT_FALSE(msg.empty()) << c.name << ": no error";
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_EQ(msg.rfind(in + c.expect, 0), 0u) << msg;
  EXPECT_EQ(std::system(("test \"$(ls -A '" + td.path() + "')\" = w.txt").c_str()), 0) << "files written";
}

INSTANTIATE_TEST_SUITE_P(FromText, BadWorkload, ::testing::ValuesIn(bad_texts()),
                         [](const auto& info) { return info.param.name; });

TEST(FromText, DlrmLastBottomBeyondTheLayersIsSilentInTheReferenceAndAnErrorByDefault) {
  TempDir td;
  std::string in = td.file("d.txt");
  test::write_file(in, replace(kDlrm, "HYBRID_DLRM 2", "HYBRID_DLRM 3"));
  test::run_from_text(in, td.file("ref"), 1, 1, true);
  auto f = test::parse_et(td.file("ref.0.et"));
  size_t alltoall = 0;
  for (const auto& n : f.nodes) alltoall += n.name() == "COMM_COLL_NODE_emb_ALLTOALL";
  EXPECT_EQ(alltoall, 1u) << "the reference drops the backward embedding all-to-all";
  EXPECT_THROW(test::run_from_text(in, td.file("def"), 1, 1, false), InputError);
}

// Python's int() reads "+5" and "1_000"; the reference's bytes are those of 5 and 1000.
TEST(CompatMode, AcceptsWhatPythonIntAccepts) {
  TempDir td;
  std::string plain = "DATA\n1\nconv -1 5 NONE 0 6 NONE 0 7 ALLREDUCE 1000 1\n";
  std::string python = "DATA\n01\nconv -1 +5 NONE 0 6 NONE 0 0_7 ALLREDUCE 1_000 1\n";
  test::write_file(td.file("plain.txt"), plain);
  test::write_file(td.file("python.txt"), python);
  test::run_from_text(td.file("plain.txt"), td.file("a"), 1, 1, true);
  test::run_from_text(td.file("python.txt"), td.file("b"), 1, 1, true);
  auto a = test::parse_et(td.file("a.0.et")), b = test::parse_et(td.file("b.0.et"));
  ASSERT_EQ(a.nodes.size(), b.nodes.size());
  for (size_t i = 0; i < a.nodes.size(); ++i) EXPECT_EQ(a.nodes[i].SerializeAsString(), b.nodes[i].SerializeAsString());
  EXPECT_THROW(test::run_from_text(td.file("python.txt"), td.file("c"), 1, 1, false), InputError);
}

TEST(FromText, OptionsOutOfRange) {
  TempDir td;
  std::string in = test::workload_txt("microAllReduce");
  EXPECT_THROW(test::run_from_text(in, td.file("o"), 0, 1, false), InputError);
  EXPECT_THROW(test::run_from_text(in, td.file("o"), 0, 1, true), InputError);
  EXPECT_THROW(test::run_from_text(in, td.file("o"), 1, 0, false), InputError);
  EXPECT_EQ(std::system(("test -z \"$(ls -A '" + td.path() + "')\"").c_str()), 0);
}

// ---- through the real binary

struct CliRun {
  int rc;
  std::string err;
};

CliRun run_cli(const std::string& args) {
  std::string cmd = std::string(std::getenv("OPFORGE_EXE")) + " " + args + " 2>&1 >/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128, out};
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::getenv("OPFORGE_EXE")) GTEST_SKIP() << "OPFORGE_EXE (path of the opforge binary) not set";
  }
};

TEST_F(Cli, MalformedLineExitsTwoWithOneLineAndNoFiles) {
  TempDir td;
  test::write_file(td.file("w.txt"), "DATA\n2\n" + kGood + "conv2 -1 5 NONE\n");
  CliRun r = run_cli("chakra from-text " + td.file("w.txt") + " --npus 4 -o " + td.file("out"));
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("opforge: " + td.file("w.txt") + ":4: a layer needs 12", 0), 0u) << r.err;
  EXPECT_FALSE(test::exists(td.file("out.0.et")));
}

TEST_F(Cli, UnsupportedTypeAndBadOptionsExitTwo) {
  TempDir td;
  std::string tr = test::workload_txt("Transformer_HybridParallel");
  for (const std::string& args :
       {tr + " --npus 2 --compat reference", tr + " --npus 2", test::workload_txt("microAllReduce") + " --npus 0",
        test::workload_txt("microAllReduce") + " --npus 1 --compat bogus", td.file("missing.txt") + " --npus 1"}) {
    CliRun r = run_cli("chakra from-text " + args + " -o " + td.file("out"));
    EXPECT_EQ(r.rc, 2) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  EXPECT_EQ(std::system(("test -z \"$(ls -A '" + td.path() + "')\"").c_str()), 0);
}

TEST_F(Cli, WritesEveryNpuFileAndWarningsDoNotFail) {
  TempDir td;
  // DATA ignores the forward comm: a warning, exit 0
  test::write_file(td.file("w.txt"), "DATA\n1\n" + replace(kGood, "NONE\t0\t6", "ALLGATHER\t8\t6"));
  CliRun r = run_cli("chakra from-text " + td.file("w.txt") + " --npus 3 --passes 2 -o " + td.file("out"));
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("warning: " + td.file("w.txt") + ":3: forward comm ALLGATHER is ignored"), std::string::npos)
      << r.err;
  for (int k = 0; k < 3; ++k) EXPECT_TRUE(test::exists(td.file("out." + std::to_string(k) + ".et")));
  EXPECT_FALSE(test::exists(td.file("out.3.et")));
}

}  // namespace
}  // namespace opf::chakra
