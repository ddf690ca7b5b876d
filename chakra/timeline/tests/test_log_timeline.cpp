// opforge chakra timeline: the reference visualizer's bytes on the copied ASTRA-sim log
// (--compat reference), the same schedule in µs by default, unmatched events reported or
// fatal, bad lines and options as one-line errors with no output.
#include <gtest/gtest.h>

#include "input_error.h"
#include "log_timeline.h"
#include "timeline_test_util.h"

namespace opf::chakra {
namespace {

using test::TempDir;

const std::string kData = OPF_TIMELINE_DATA;
const std::string kLog = kData + "/DLRM_HybridParallel.npus1.passes2.0.timeline.log";
const std::string kRef = kData + "/DLRM_HybridParallel.npus1.passes2.0.timeline.json";

LogTimelineOptions opts(bool compat, std::vector<std::string>* warnings = nullptr, int64_t npus = 2,
                        int64_t mhz = 1000) {
  LogTimelineOptions o;
  o.npus = npus;
  o.npu_frequency_mhz = mhz;
  o.compat_reference = compat;
  o.warn = [warnings](const std::string& w) {
    if (warnings) warnings->push_back(w);
  };
  return o;
}

TEST(Reference, ByteIdenticalToTheVisualizersOutput) {
  TempDir td;
  LogTimelineStats st = log_timeline(kLog, td.file("t.json"), opts(true));
  EXPECT_EQ(st.events, 128u);
  const std::string got = test::read_file(td.file("t.json")), want = test::read_file(kRef);
  ASSERT_FALSE(want.empty());
  EXPECT_TRUE(got == want) << "first difference at byte "
                           << std::mismatch(got.begin(), got.end(), want.begin(), want.end()).first - got.begin();
}

TEST(Reference, ThroughTheCli) {
  OPF_REQUIRE_CLI();
  TempDir td;
  auto r = test::run_cli("chakra timeline --log " + kLog + " --npus 2 --npu-frequency 1000 --compat reference -o " +
                         td.file("t.json"));
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(test::read_file(td.file("t.json")) == test::read_file(kRef));
}

TEST(Default, SameScheduleInMicrosecondsWithNamedThreads) {
  TempDir td;
  std::vector<std::string> warnings;
  log_timeline(kLog, td.file("d.json"), opts(false, &warnings));
  EXPECT_TRUE(warnings.empty()) << warnings[0];
  size_t meta = 0;
  auto d = test::x_events(test::read_file(td.file("d.json")), &meta);
  auto r = test::x_events(test::read_file(kRef));
  ASSERT_EQ(d.size(), 128u);
  ASSERT_EQ(r.size(), d.size());
  EXPECT_EQ(meta, 2u + 2u * 2u) << "2 NPUs, each with a compute and a communication thread";
  for (size_t k = 0; k < d.size(); ++k) {
    EXPECT_EQ(d[k].pid, r[k].pid);
    EXPECT_EQ(d[k].tid, r[k].tid);
    EXPECT_EQ(d[k].name, r[k].name);
    EXPECT_DOUBLE_EQ(d[k].ts, r[k].ts * 1000) << "µs, where the reference writes ms";
    EXPECT_DOUBLE_EQ(d[k].dur, r[k].dur * 1000);
  }
  EXPECT_EQ(d[0].ts, 0);
  EXPECT_EQ(d[0].dur, 0.3) << "300 cycles at 1000 MHz";
}

// NPU 0: node 1 issued and called back; node 2 issued twice, called back once; node 3 issued
// only; node 4 called back only. A spdlog-style prefix and a name with '=' and ','.
const char* kUnmatched =
    "header line\n"
    "issue,sys->id=0,tick=0,node->id=1,node->name=COMP_NODE_a=b,c\n"
    "[2026-01-01 00:00:00.000] [workload] [info] issue,sys->id=0,tick=5,node->id=2,node->name=COMM_COLL_NODE_x\n"
    "issue,sys->id=0,tick=7,node->id=2,node->name=COMM_COLL_NODE_x\n"
    "callback,sys->id=0,tick=10,node->id=1,node->name=COMP_NODE_a=b,c\n"
    "issue,sys->id=0,tick=10,node->id=3,node->name=COMP_NODE_y\n"
    "callback,sys->id=0,tick=12,node->id=4,node->name=COMP_NODE_z\n"
    "callback,sys->id=0,tick=20,node->id=2,node->name=COMM_COLL_NODE_x\n";

TEST(Default, ReportsUnmatchedEventsAndKeepsTheRest) {
  TempDir td;
  test::write_file(td.file("l.log"), kUnmatched);
  std::vector<std::string> w;
  LogTimelineStats st = log_timeline(td.file("l.log"), td.file("d.json"), opts(false, &w, 1, 2));
  EXPECT_EQ(st.events, 2u);
  EXPECT_EQ(st.callbacks_without_issue, 1u);
  EXPECT_EQ(st.repeated_issues, 1u);
  EXPECT_EQ(st.issues_without_callback, 1u);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_NE(w[0].find("1 callback(s) without an issue, left out; first: " + td.file("l.log") + ":7 (NPU 0, node 4)"),
            std::string::npos)
      << w[0];
  EXPECT_NE(w[1].find(":3 (NPU 0, node 2)"), std::string::npos) << w[1];
  EXPECT_NE(w[2].find("1 issue(s) without a callback, left out; first: " + td.file("l.log") + ":6 (NPU 0, node 3)"),
            std::string::npos)
      << w[2];
  auto d = test::x_events(test::read_file(td.file("d.json")));
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].name, "COMP_NODE_a=b,c") << "the whole name (the reference cuts it at '=')";
  EXPECT_EQ(d[0].dur, 5) << "10 cycles at 2 MHz";
  EXPECT_EQ(d[1].ts, 3.5) << "the repeated issue (tick 7) counts";
  EXPECT_EQ(d[1].tid, 4);
}

TEST(Reference, FailsWhereTheReferenceFailsAndWritesNothing) {
  TempDir td;
  test::write_file(td.file("l.log"), kUnmatched);
  try {
    log_timeline(td.file("l.log"), td.file("r.json"), opts(true, nullptr, 1, 2));
    FAIL() << "no error";
  } catch (const InputError& e) {
    // the spdlog line is "Unsupported trace_type" for the reference
    EXPECT_NE(std::string(e.what()).find(td.file("l.log") + ":3: unsupported trace type '[2026-01-01 00:00:00.000] "
                                                            "[workload] [info] issue'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(test::exists(td.file("r.json")));
}

struct BadCase {
  const char* log;
  bool compat;
  const char* message;
};

class BadInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadInput, OneLineErrorExitTwoNoOutput) {
  OPF_REQUIRE_CLI();
  TempDir td;
  test::write_file(td.file("l.log"), GetParam().log);
  auto r = test::run_cli("chakra timeline --log " + td.file("l.log") + " --npus 2 --npu-frequency 1000 -o " +
                         td.file("o.json") + (GetParam().compat ? " --compat reference" : ""));
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err, "opforge: " + td.file("l.log") + GetParam().message + "\n");
  EXPECT_FALSE(test::exists(td.file("o.json")));
}

INSTANTIATE_TEST_SUITE_P(
    Timeline, BadInput,
    ::testing::Values(
        BadCase{"issue,sys->id=2,tick=0,node->id=1,node->name=COMP_NODE\n", false, ":1: sys->id=2 but --npus is 2"},
        BadCase{"x\nissue,sys->id=2,tick=0,node->id=1,node->name=COMP_NODE\n", true, ":2: sys->id=2 but --npus is 2"},
        BadCase{"issue,sys->id=0,tick=x,node->id=1,node->name=COMP_NODE\n", false,
                ":1: tick= 'x' is not a non-negative integer"},
        BadCase{"issue,sys->id=0,tick=1,node->id=1\n", false, ":1: the event ends after 'node->id='"},
        BadCase{"issue,sys->id=0,tick=1,node->id=1\n", true, ":1: no node->name column (the reference's IndexError)"},
        BadCase{"issue,sys->id=0,tick=9,node->id=1,node->name=COMP_NODE\ncallback,sys->id=0,tick=3,node->id=1,node->"
                "name=C\n",
                false, ":2: callback at tick 3 before its issue at tick 9 (line 1)"},
        BadCase{
            "issue,sys->id=0,tick=0,node->id=1,node->name=WHAT\ncallback,sys->id=0,tick=3,node->id=1,node->name=W\n",
            true, ":2: node type cannot be identified from the name 'WHAT'"}));

TEST(Options, ZeroNpusOrFrequencyAreErrors) {
  TempDir td;
  EXPECT_THROW(log_timeline(kLog, td.file("o.json"), opts(false, nullptr, 0, 1000)), InputError);
  EXPECT_THROW(log_timeline(kLog, td.file("o.json"), opts(true, nullptr, 2, 0)), InputError);
  EXPECT_FALSE(test::exists(td.file("o.json")));
}

}  // namespace
}  // namespace opf::chakra
