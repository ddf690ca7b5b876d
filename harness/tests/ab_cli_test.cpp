// `opforge ab` as a subprocess on this build (OPFORGE_EXE, OPFORGE_BUILD_ROOT set by meson test),
// both sides the same build directory (--no-build): an A/A run records its paired ratios per
// round, centred on 1; the same build with a known 2x slowdown injected into the head's
// rms_norm calls (OPFORGE_AB_SLOWDOWN) is SLOWER and exits 1 while the untouched probe stays a
// control; a small in-out case is timed warm (no cache eviction before each call); bad input
// exits 2 with one line and writes no ab.json.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "matrix/json.h"

namespace opf::matrix {
namespace {
namespace fs = std::filesystem;
using json::parse_file;
using json::Value;

struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/opf-ab-cli-test-XXXXXX";
    path = mkdtemp(t);
  }
  ~TempDir() { fs::remove_all(path); }
};

struct Result {
  int code = -1;
  std::string err;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

Result ab(const std::string& dir, const std::vector<std::string>& args, const std::string& env = "") {
  std::string cmd = env + " " + std::getenv("OPFORGE_EXE") + " ab";
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " > " + dir + "/stdout 2> " + dir + "/stderr";
  const int st = std::system(cmd.c_str());
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, slurp(dir + "/stderr")};
}

#define NEED_BUILD()                                                                     \
  if (!std::getenv("OPFORGE_EXE") || !std::getenv("OPFORGE_BUILD_ROOT"))                 \
    GTEST_SKIP() << "OPFORGE_EXE / OPFORGE_BUILD_ROOT not set (run through meson test)"; \
  const std::string build = std::getenv("OPFORGE_BUILD_ROOT")

// One rms_norm benchmark (small, 1 thread) and the probes, no instruction counts: seconds.
std::vector<std::string> quick(const std::string& build, const std::string& out, int rounds) {
  return {"--base",
          build,
          "--head",
          build,
          "--no-build",
          "--op",
          "rms_norm",
          "--filter",
          "f32/forward/16384x1024/threads:1$",
          "--rounds",
          std::to_string(rounds),
          "--block-seconds",
          "0.05",
          "--no-instructions",
          "--out",
          out};
}

// The band a median paired ratio of one build against itself stays in on this noisy 2-core VM.
constexpr double kSameLow = 0.7, kSameHigh = 1.4;

const Value* find_bench(const Value& doc, const std::string& prefix) {
  for (const auto& b : doc.get("benchmarks").as_array())
    if (b.str("name").rfind(prefix, 0) == 0) return &b;
  return nullptr;
}

TEST(AbCli, SameBuildAgainstItself) {
  NEED_BUILD();
  TempDir t;
  const Result r = ab(t.path, quick(build, t.path + "/aa", 6));
  ASSERT_EQ(r.code, 0) << r.err;
  const Value doc = parse_file(t.path + "/aa/ab.json");
  EXPECT_EQ(doc.str("schema"), "opforge.ab/1");
  const Value* b = find_bench(doc, "rms_norm/cpu/f32/forward/16384x1024/threads:1");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->str("role"), "gated");
  EXPECT_EQ(b->get("ratios").as_array().size(), 6u);
  for (const auto& x : b->get("ratios").as_array()) EXPECT_GT(x.as_double(), 0);
  // the same binary on both sides: no systematic bias from the pairing (first/second, warm/cold);
  // whether noise alone ever reads as SLOWER is what tools/ab_rates.sh measures, over many runs
  EXPECT_GT(b->num("median_ratio"), kSameLow);
  EXPECT_LT(b->num("median_ratio"), kSameHigh);
  const Value* probe = find_bench(doc, "probe/stream_triad/threads:1");
  ASSERT_TRUE(probe);
  EXPECT_EQ(probe->str("role"), "control");
  EXPECT_EQ(doc.get("instructions").str("status"), "skip");
  EXPECT_TRUE(fs::exists(t.path + "/aa/ab.md"));
}

TEST(AbCli, InjectedSlowdownIsSlowerAndFails) {
  NEED_BUILD();
  TempDir t;
  const Result r = ab(t.path, quick(build, t.path + "/ab", 8), "OPFORGE_AB_SLOWDOWN_UNUSED=1");
  ASSERT_EQ(r.code, 0) << r.err;  // the variable only acts through --head-env
  std::vector<std::string> args = quick(build, t.path + "/ab2", 8);
  args.insert(args.end(), {"--head-env", "OPFORGE_AB_SLOWDOWN=^rms_norm/=1.0"});
  const Result s = ab(t.path, args);
  ASSERT_EQ(s.code, 1) << s.err;
  const Value doc = parse_file(t.path + "/ab2/ab.json");
  const Value* b = find_bench(doc, "rms_norm/cpu/f32/forward/16384x1024/threads:1");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->str("verdict"), "SLOWER");
  // The spin is a fraction of each call's own time, so the head's noise doubles with it, and read
  // ratios run high: 2.66 in a quiet CI run, 3.49 on a machine loaded by other builds. The bounds
  // catch what would be a bug: the spin on the wrong side (< 1) or in the wrong unit (10x).
  EXPECT_GT(b->num("median_ratio"), 2 * kSameLow);
  EXPECT_LT(b->num("median_ratio"), 5.0);
  EXPECT_EQ(doc.num("regressions"), 1);
  EXPECT_NE(find_bench(doc, "probe/stream_triad/threads:1")->str("verdict"), "SLOWER");
  // a second pair of processes confirmed it
  ASSERT_EQ(b->get("confirmations").as_array().size(), 1u);
  EXPECT_EQ(b->get("confirmations").as_array()[0].str("verdict"), "SLOWER");
}

// A slowdown of the first pair of processes only (a bias that lives as long as a process) is not
// confirmed by the second: AMBIGUOUS with both readings, exit 0.
TEST(AbCli, SlowerInOnePairOfProcessesOnlyIsNotConfirmed) {
  NEED_BUILD();
  TempDir t;
  std::vector<std::string> args = quick(build, t.path + "/ab", 8);
  args.insert(args.end(),
              {"--head-env", "OPFORGE_AB_SLOWDOWN=^rms_norm/=1.0", "--head-env", "OPFORGE_AB_SLOWDOWN_PAIR=1"});
  const Result s = ab(t.path, args);
  ASSERT_EQ(s.code, 0) << s.err;
  const Value doc = parse_file(t.path + "/ab/ab.json");
  const Value* b = find_bench(doc, "rms_norm/cpu/f32/forward/16384x1024/threads:1");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->str("verdict"), "AMBIGUOUS");
  EXPECT_GT(b->num("median_ratio"), 2 * kSameLow);  // the first pair did read it slower
  ASSERT_EQ(b->get("confirmations").as_array().size(), 1u);
  EXPECT_NE(b->get("confirmations").as_array()[0].str("verdict"), "SLOWER");
  EXPECT_NE(b->str("note").find("in another"), std::string::npos) << b->str("note");
  EXPECT_EQ(doc.num("regressions"), 0);
}

// --repeat: every run has its own pair of processes, so a bias of one pair (here: a 2x slowdown of
// the first pair's head only) is one run's SLOWER, which its confirming pair does not keep, and
// the next run (a third pair) does not see it at all.
TEST(AbCli, RepeatRunsEachInItsOwnPairOfProcesses) {
  NEED_BUILD();
  TempDir t;
  std::vector<std::string> args = quick(build, t.path + "/ab", 6);
  args.insert(args.end(), {"--repeat", "2", "--head-env", "OPFORGE_AB_SLOWDOWN=^rms_norm/=1.0", "--head-env",
                           "OPFORGE_AB_SLOWDOWN_PAIR=1"});
  const Result s = ab(t.path, args);
  ASSERT_EQ(s.code, 0) << s.err;
  const Value doc = parse_file(t.path + "/ab/ab.json");
  const Value* b = find_bench(doc, "rms_norm/cpu/f32/forward/16384x1024/threads:1");
  ASSERT_TRUE(b);
  const auto& ratios = b->get("ratios").as_array();
  ASSERT_EQ(ratios.size(), 12u);
  std::vector<double> first, second;
  for (size_t i = 0; i < 12; ++i) (i < 6 ? first : second).push_back(ratios[i].as_double());
  EXPECT_GT(*std::min_element(first.begin(), first.end()), 2 * kSameLow);  // pair 1: slowed
  std::sort(second.begin(), second.end());
  EXPECT_LT(second[3], kSameHigh);  // pair 3: not slowed
  const auto& per_run = b->get("per_run").as_array();
  ASSERT_EQ(per_run.size(), 2u);
  EXPECT_EQ(per_run[0].as_string(), "AMBIGUOUS");  // run 1's SLOWER, not kept by pair 2
  EXPECT_NE(per_run[1].as_string(), "SLOWER");
  ASSERT_FALSE(b->get("confirmations").as_array().empty());
  EXPECT_EQ(b->get("confirmations").as_array()[0].num("run"), 1);
  EXPECT_NE(b->get("confirmations").as_array()[0].str("verdict"), "SLOWER");
  EXPECT_EQ(doc.num("runs_with_slower"), 0);
  EXPECT_EQ(doc.num("regressions"), 0);
  for (const char* log : {"base-serve.log", "head-serve.log", "base-serve-2.log", "head-serve-3.log"})
    EXPECT_TRUE(fs::exists(t.path + "/ab/" + log)) << log;
}

// --skip-identical (CI's ab of a shared-code change): a module that is the same bytes in both
// builds is not timed, and says so; here both sides are one build, so nothing is timed.
TEST(AbCli, SkipIdenticalTimesNoOpWhoseModuleIsTheSameBytes) {
  NEED_BUILD();
  // a JIT build has no module files to compare (ab then times everything, as it should)
  if (!fs::exists(build + "/kernels/opf_rms_norm_cpu.so"))
    GTEST_SKIP() << "no prebuilt rms_norm module in " << build << " (a JIT-mode build)";
  TempDir t;
  std::vector<std::string> args = quick(build, t.path + "/same", 6);
  args.push_back("--skip-identical");
  const Result r = ab(t.path, args);
  ASSERT_EQ(r.code, 0) << r.err;
  const Value doc = parse_file(t.path + "/same/ab.json");
  EXPECT_TRUE(doc.get("benchmarks").as_array().empty());
  std::vector<std::string> skipped;
  for (const auto& n : doc.get("not_timed_identical_module").as_array()) skipped.push_back(n.as_string());
  EXPECT_EQ(skipped, std::vector<std::string>{"rms_norm/cpu/f32/forward/16384x1024/threads:1"});
  EXPECT_NE(slurp(t.path + "/stdout").find("byte-identical in both builds"), std::string::npos);
}

// A block of an op with in-out arguments whose case fits in a core's L2 (syncbn welford_parallel:
// a few KiB) times warm calls, as every case without in-out arguments does: tens of thousands in
// 0.05 s, not a few dozen each behind a 64 MiB cache eviction. Those cold calls took their
// latency from where each process's pages happened to lie (A/A 0.8-1.35x per pair of processes).
TEST(AbCli, SmallInOutCaseIsTimedWithoutEvictingTheCaches) {
  NEED_BUILD();
  const std::string name = "syncbn/cpu/f32/welford_parallel/8x64x784/threads:1";
  TempDir t;
  std::ofstream(t.path + "/requests") << "prepare " << name << "\ntime " << name << " 0.05\nquit\n";
  const std::string cmd = build + "/harness/suites/opforge-kernel-bench --ab-serve < " + t.path + "/requests > " +
                          t.path + "/replies 2> " + t.path + "/stderr";
  const int st = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << slurp(t.path + "/stderr");
  std::istringstream replies(slurp(t.path + "/replies"));
  std::string prepared, ns;
  std::getline(replies, prepared);
  if (prepared.find("no benchmark") != std::string::npos) GTEST_SKIP() << "syncbn is not in this build: " << prepared;
  ASSERT_EQ(prepared, "ok");
  double median = 0;
  long long calls = 0;
  ASSERT_TRUE(replies >> ns >> median >> calls) << slurp(t.path + "/replies");
  EXPECT_EQ(ns, "ns");
  EXPECT_GT(median, 0);
  EXPECT_GT(calls, 1000) << "median call " << median << " ns";
}

TEST(AbCli, BadInputExits2WithOneLineAndNoResults) {
  NEED_BUILD();
  TempDir t;
  auto expect_bad = [&](const std::vector<std::string>& args, const std::string& needle) {
    const Result r = ab(t.path, args);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  };
  auto args = quick(build, t.path + "/bad", 6);
  args[1] = "no-such-revision-xyz";
  expect_bad(args, "--base 'no-such-revision-xyz'");
  EXPECT_FALSE(fs::exists(t.path + "/bad/ab.json"));
  args = quick(build, t.path + "/bad", 6);
  args[8] = "f32/(forward";
  expect_bad(args, "--filter");
  args = quick(build, t.path + "/bad", 6);
  args[6] = "no_such_op";
  expect_bad(args, "no benchmark of both builds");
  args = quick(build, t.path + "/bad", 1);
  expect_bad(args, "--rounds");
  EXPECT_FALSE(fs::exists(t.path + "/bad/ab.json"));
  // an existing ab.json is never replaced without --force
  fs::create_directories(t.path + "/keep");
  std::ofstream(t.path + "/keep/ab.json") << "mine";
  expect_bad(quick(build, t.path + "/keep", 6), "not overwriting");
  EXPECT_EQ(slurp(t.path + "/keep/ab.json"), "mine");
}

}  // namespace
}  // namespace opf::matrix
