// Report, merge, result parsing, emitters and the gate CLI on synthetic runs written here (the
// layout documented in results/README.md); no project builds.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "common/files.h"
#include "matrix/emit.h"
#include "matrix/gate_input.h"
#include "matrix/json.h"
#include "matrix/merge.h"
#include "matrix/report.h"
#include "matrix/run_layout.h"
#include "matrix/runner.h"
#include "matrix/test_results.h"
#include "opforge/error.h"
#include "synthetic.h"

namespace opf::matrix {
namespace {
namespace fs = std::filesystem;

struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/opf-harness-test-XXXXXX";
    path = mkdtemp(t);
  }
  ~TempDir() { fs::remove_all(path); }
};

// google-benchmark 1.7 JSON with --benchmark_repetitions: iteration entries + aggregates
std::string bench_json(const std::vector<std::pair<std::string, std::vector<double>>>& series, double bytes) {
  json::Value doc;
  json::Value ctx;
  ctx.set("library_version", "v1.7.1");
  doc.set("context", ctx);
  json::Value arr = json::Array{};
  for (const auto& [name, ns] : series) {
    for (size_t i = 0; i < ns.size(); ++i) {
      json::Value b;
      b.set("name", name);
      b.set("run_name", name);
      b.set("run_type", "iteration");
      b.set("repetitions", int64_t(ns.size()));
      b.set("repetition_index", int64_t(i));
      b.set("iterations", 100);
      b.set("real_time", ns[i] / 1e3);
      b.set("cpu_time", ns[i] / 1e3);
      b.set("time_unit", "us");
      if (bytes > 0) b.set("bytes_per_second", bytes / (ns[i] * 1e-9));
      arr.push(b);
    }
    json::Value agg;
    agg.set("name", name + "_mean");
    agg.set("run_name", name);
    agg.set("run_type", "aggregate");
    agg.set("aggregate_name", "mean");
    agg.set("real_time", 1.0);
    agg.set("time_unit", "us");
    arr.push(agg);
  }
  doc.set("benchmarks", arr);
  return json::dump(doc);
}

const char* kJunit = R"XML(<?xml version="1.0" encoding="utf-8"?>
<testsuites>
  <testsuite name="kernel" tests="3">
    <testcase name="layer_norm/cpu/f32/forward/7x13" status="run" time="0.01" classname="kernel"/>
    <testcase name="layer_norm/cuda/f32/forward/7x13" status="run" result="skipped" time="0" classname="kernel">
      <skipped message="../harness/suites/kernel_test.cpp:69&#10;backend cuda not available here: no CUDA driver (libcuda.so.1 not loadable)">x</skipped>
    </testcase>
    <testcase name="rms_norm/cpu/bf16/backward/3x1" status="run" time="0.02" classname="kernel">
      <failure message="../harness/suites/kernel_test.cpp:80&#10;first bad index 2: got 1.5, want 1.25" type=""/>
    </testcase>
  </testsuite>
</testsuites>
)XML";

// The cell's benchmark JSON: host rows with the triad probes, GPU rows with a device copy probe.
void write_bench(const std::string& cd, double slow, uint64_t seed) {
  files::write_atomic(
      cd + "/bench/opforge-kernel-bench.json",
      bench_json({{"probe/stream_triad/threads:1/real_time", opf::testing::normal_samples(seed, 10, 1e6, 1e4)},
                  {"probe/stream_triad/threads:2/real_time", opf::testing::normal_samples(seed + 3, 10, 0.5e6, 0.5e4)},
                  {"layer_norm/cpu/f32/forward/4096x4096/threads:1/real_time",
                   opf::testing::normal_samples(seed + 1, 10, 5e6 * slow, 5e4)},
                  {"layer_norm/cpu/f32/forward/4096x4096/threads:2/real_time",
                   opf::testing::normal_samples(seed + 4, 10, 2.5e6 * slow, 2.5e4)},
                  {"peer/onednn/layer_norm/f32/forward/4096x4096/threads:1/real_time",
                   opf::testing::normal_samples(seed + 2, 10, 4e6, 4e4)},
                  // GPU rows (device-timed): against the device copy probe, never the host triad
                  {"probe/device_copy/cuda/manual_time", opf::testing::normal_samples(seed + 5, 10, 0.1e6, 1e3)},
                  {"layer_norm/cuda/f32/forward/4096x4096/threads:1/manual_time",
                   opf::testing::normal_samples(seed + 6, 10, 0.25e6 * slow, 2.5e3)},
                  {"peer/cublaslt/layer_norm/f32/forward/4096x4096/threads:1/manual_time",
                   opf::testing::normal_samples(seed + 7, 10, 0.5e6, 5e3)}},
                 128e6));
}

// A finished run with one cell; `slow` scales its benchmark times.
void write_run(const std::string& dir, const std::string& cell_id, const std::string& cell_name, double slow,
               uint64_t seed) {
  json::Value run;
  run.set("schema", "opforge.run/1");
  run.set("run", fs::path(dir).filename().string());
  json::Value git;
  git.set("sha", "0123456789abcdef0123456789abcdef01234567");
  git.set("dirty", false);
  run.set("git", git);
  json::Value machine;
  machine.set("host", "testhost");
  machine.set("cpu_model", "Test CPU");
  machine.set("cores", 2);
  run.set("machine", machine);
  json::Value bw;
  bw.set("triad_gbs", 20.0);
  bw.set("method", "synthetic");
  run.set("bandwidth", bw);
  json::Value matrix;
  matrix.set("file", "matrices/test.toml");
  matrix.set("sha256", "abcdef0123456789");
  matrix.set("planned_cells", 2);
  run.set("matrix", matrix);
  json::Value cell_ref;
  cell_ref.set("id", cell_id);
  cell_ref.set("name", cell_name);
  cell_ref.set("origin", "cell");
  json::Value opts;
  opts.set("mode", "'prebuilt'");
  cell_ref.set("options", opts);
  run.set("cells", json::Array{cell_ref});
  files::write_atomic(dir + "/run.json", json::dump(run));

  std::string cd = dir + "/cells/" + cell_id;
  write_bench(cd, slow, seed);
  files::write_atomic(cd + "/meson/testlog.junit.xml", kJunit);
  json::Value probe;
  probe.set("schema", "opforge.probe/1");
  json::Value load;
  load.set("op", "layer_norm");
  load.set("backend", "cpu");
  load.set("status", "loaded");
  json::Value cold, warm;
  cold.set("source", "jit-compiled");
  cold.set("seconds", 0.61);
  warm.set("source", "jit-cache");
  warm.set("seconds", 0.00004);
  load.set("cold", cold);
  load.set("warm", warm);
  probe.set("loads", json::Array{load});
  files::write_atomic(cd + "/probe.json", json::dump(probe));
  files::write_atomic(
      cd + "/chakra/regress.json",
      R"({"traces": [{"trace": "resnet_et", "status": "pass", "convert_seconds": 0.42, "golden_sha256": "feed"}]})");
  auto cases = collect_cell_tests(cd);
  files::write_atomic(cd + "/tests.json", json::dump(cases_json(cases)));
  json::Value cell;
  cell.set("schema", "opforge.cell/1");
  cell.set("id", cell_id);
  cell.set("name", cell_name);
  cell.set("options", opts);
  cell.set("status", "fail");
  cell.set("seconds", 75.0);
  json::Value steps = json::Array{};
  for (auto [n, st] : std::vector<std::pair<const char*, const char*>>{
           {"setup", "pass"}, {"compile", "pass"}, {"test", "fail"}, {"bench", "pass"}}) {
    json::Value s;
    s.set("name", n);
    s.set("status", st);
    s.set("seconds", 12.5);
    s.set("log", std::string("logs/") + n + ".log");
    if (std::string(st) == "fail") s.set("detail", "1 failed");
    steps.push(s);
  }
  cell.set("steps", steps);
  cell.set("bench", json::Array{json::Value("bench/opforge-kernel-bench.json")});
  cell.set("chakra", "chakra/regress.json");
  json::Value debt = json::Array{};
  for (const auto& c : cases)
    if (is_gpu_debt(c)) {
      json::Value d;
      d.set("test", c.key);
      d.set("reason", c.message);
      debt.push(d);
    }
  cell.set("gpu_debt", debt);
  files::write_atomic(cd + "/cell.json", json::dump(cell));
  files::write_atomic(dir + "/gpu_debt.json", json::dump(gpu_debt_ledger(dir, "0123456789ab")));
}

TEST(TestResults, JunitCasesAndSkipReasons) {
  TempDir t;
  files::write_atomic(t.path + "/j.xml", kJunit);
  auto cases = read_junit(t.path + "/j.xml");
  ASSERT_EQ(cases.size(), 3u);
  EXPECT_EQ(cases[0].result, "pass");
  EXPECT_EQ(cases[1].result, "skip");
  // the file:line line is dropped; the reason stays
  EXPECT_EQ(cases[1].message, "backend cuda not available here: no CUDA driver (libcuda.so.1 not loadable)");
  EXPECT_TRUE(is_gpu_debt(cases[1]));
  EXPECT_FALSE(is_gpu_debt(cases[0]));
  EXPECT_FALSE(is_gpu_debt(cases[2]));  // a failure is not debt
  EXPECT_EQ(cases[2].result, "fail");
  EXPECT_EQ(cases[2].message, "first bad index 2: got 1.5, want 1.25");
  files::write_atomic(t.path + "/bad.xml", "<testsuites><testsuite>");
  EXPECT_THROW(read_junit(t.path + "/bad.xml"), Error);
}

// The benchmark's GPU cases it could not run are GPU debt like the skipped GPU tests; its other
// "not run" lines (a peer's own limits) are not.
TEST(TestResults, BenchmarksNotRunForLackOfADeviceAreOwed) {
  TempDir t;
  files::write_atomic(
      t.path + "/b.json",
      R"({"context": {"opforge_not_run": "336 not run (layer_norm/cuda/f32/forward/4096x4096/threads:1, ...): backend )"
      R"(cuda not available here: no CUDA driver (libcuda.so.1 not loadable)\n4 not run (peer/torch/rms_norm/f16/)"
      R"(backward/4096x4096/threads:1, ...): torch f16: f16 backward misses the tolerance\n"}, "benchmarks": []})");
  const auto debt = bench_gpu_debt(t.path + "/b.json");
  ASSERT_EQ(debt.size(), 1u);
  EXPECT_EQ(debt[0].key, "bench: 336 not run (layer_norm/cuda/f32/forward/4096x4096/threads:1, ...)");
  EXPECT_EQ(debt[0].message, "backend cuda not available here: no CUDA driver (libcuda.so.1 not loadable)");
  EXPECT_EQ(debt[0].result, "skip");
  EXPECT_TRUE(bench_gpu_debt(t.path + "/missing.json").empty());
}

TEST(TestResults, BenchmarkJsonKeepsEveryRepetition) {
  TempDir t;
  files::write_atomic(t.path + "/b.json", bench_json({{"x/cpu/f32/forward/8/real_time", {1000, 1100, 900}}}, 0));
  auto b = read_benchmark_json(t.path + "/b.json", "cell");
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].ns, (std::vector<double>{1000, 1100, 900}));  // us -> ns, aggregates dropped
  files::write_atomic(t.path + "/nb.json", "{\"context\": {}}");
  EXPECT_THROW(read_benchmark_json(t.path + "/nb.json", "c"), Error);
}

TEST(Report, SelfContainedHtmlWithEverySection) {
  TempDir t;
  write_run(t.path + "/run", "aaaaaaaaaaaa", "prebuilt", 1.0, 1);
  auto r = render_report(t.path + "/run");
  for (const char* s :
       {"Matrix: cell &times; step", "Tests", "Performance", "JIT cold vs warm", "Chakra conversion", "GPU debt"})
    EXPECT_NE(r.html.find(s), std::string::npos) << s;
  EXPECT_EQ(r.html.find("<script"), std::string::npos);
  EXPECT_EQ(r.html.find("http://"), r.html.find("http://www.w3.org/2000/svg"));  // no external resources
  size_t svgs = 0;
  for (size_t p = r.html.find("<svg"); p != std::string::npos; p = r.html.find("<svg", p + 1)) ++svgs;
  EXPECT_GE(svgs, 4u);  // grid, layer_norm perf, loads, chakra
  // performance numbers: 128e6 bytes / 5 ms = 25.6 GB/s at 1 thread, 51.2 at 2; each thread count
  // is measured against the probe at that count (128e6 / 1 ms = 128 GB/s, / 0.5 ms = 256 GB/s)
  EXPECT_NE(r.markdown.find("#### layer_norm"), std::string::npos) << r.markdown;
  for (const char* row : {"| f32 forward 4096x4096 | 1 | cpu |", "| f32 forward 4096x4096 | 2 | cpu |"}) {
    const size_t at = r.markdown.find(row);
    ASSERT_NE(at, std::string::npos) << row << "\n" << r.markdown;
    const std::string line = r.markdown.substr(at, r.markdown.find('\n', at) - at);
    EXPECT_NE(line.find("| 20 % | 1.00x |"), std::string::npos) << line;  // each against its own probe
  }
  EXPECT_NE(r.markdown.find("peer onednn"), std::string::npos);
  // GPU: 128e6 B / 0.25 ms = 512 GB/s against the copy probe's 1280 GB/s (0.1 ms): 40 %; its GPU
  // peer (0.5 ms) is compared with our GPU row (0.5x), the CPU rows with the host probe as above
  for (const char* row : {"| f32 forward 4096x4096 | 1 | cuda |", "| f32 forward 4096x4096 | 1 | peer cublaslt |"}) {
    const size_t at = r.markdown.find(row);
    ASSERT_NE(at, std::string::npos) << row << "\n" << r.markdown;
    const std::string line = r.markdown.substr(at, r.markdown.find('\n', at) - at);
    EXPECT_NE(line.find(std::string(row).find("peer") != std::string::npos ? "| 20 % | 0.50x |" : "| 40 % | 1.00x |"),
              std::string::npos)
        << line;
  }
  const auto dev = r.markdown.find("; cuda: ");
  ASSERT_NE(dev, std::string::npos) << r.markdown;
  EXPECT_NEAR(std::atof(r.markdown.c_str() + dev + 8), 1280.0, 20.0);  // 128e6 B / ~0.1 ms (1 % noise)
  EXPECT_EQ(r.markdown.compare(r.markdown.find(" GB/s", dev), 45, " GB/s (probe/device_copy/cuda/manual_time (in"), 0)
      << r.markdown.substr(dev, 120);
  auto ref = r.markdown.find("bandwidth reference 1 thread(s): ");
  ASSERT_NE(ref, std::string::npos) << r.markdown;
  EXPECT_NEAR(std::atof(r.markdown.c_str() + ref + 33), 128.0, 2.0);  // mean of 128e6 B / ~1 ms (1 % noise)
  EXPECT_NE(r.markdown.find("probe/stream_triad/threads:1/real_time (in the benchmark run)"), std::string::npos);
  EXPECT_NE(r.markdown.find("probe/stream_triad/threads:2/real_time (in the benchmark run)"), std::string::npos);
  EXPECT_NE(r.markdown.find("resnet_et | pass | 0.420 s"), std::string::npos);
  EXPECT_NE(r.markdown.find("no CUDA driver"), std::string::npos);  // debt shows its reason
  EXPECT_NE(r.markdown.find("1 item(s)"), std::string::npos);
  EXPECT_NE(r.markdown.find("| jit-compiled | 0.61 s | jit-cache | 0.04 ms |"), std::string::npos);
  write_report(t.path + "/run");
  EXPECT_TRUE(files::exists(t.path + "/run/report.html"));
  EXPECT_THROW(render_report(t.path + "/nothing"), Error);
}

// The Chakra step fails, with its reason, when `opforge chakra regress` exits 0 having converted
// nothing: no record, no trace lines, or only skipped traces (what a build without its corpus
// used to report as a pass).
TEST(ChakraStep, ZeroTracesConvertedIsAFailureWithItsReason) {
  auto doc = [](const std::vector<std::string>& statuses) {
    std::vector<ChakraOutcome> v;
    for (const auto& s : statuses) v.push_back({"cell", "t", s, "", 0});
    return v;
  };
  EXPECT_NE(chakra_no_work_reason(doc({})).find("converted zero traces"), std::string::npos);
  EXPECT_NE(chakra_no_work_reason(doc({})).find("reported no trace"), std::string::npos);
  EXPECT_NE(chakra_no_work_reason(doc({"skip", "skip", "skip"})).find("none of the 3"), std::string::npos);
  EXPECT_EQ(chakra_no_work_reason(doc({"skip", "pass"})), "");
  EXPECT_EQ(chakra_no_work_reason(doc({"pass"})), "");
}

TEST(Merge, BundlesBecomeOneRun) {
  TempDir t;
  write_run(t.path + "/b1", "aaaaaaaaaaaa", "prebuilt", 1.0, 1);
  write_run(t.path + "/b2", "bbbbbbbbbbbb", "jit", 1.0, 2);
  auto res = merge_runs({t.path + "/b1", t.path + "/b2"}, t.path + "/merged");
  EXPECT_EQ(res.cells, 2);
  auto m = json::parse_file(t.path + "/merged/run.json");
  EXPECT_EQ(m.get("cells").as_array().size(), 2u);
  EXPECT_EQ(m.get("merged_from").as_array().size(), 2u);
  EXPECT_EQ(json::parse_file(t.path + "/merged/gpu_debt.json").get("items").as_array().size(), 2u);
  EXPECT_EQ(finished_cells(t.path + "/merged").size(), 2u);
  // the merged run reads like any run
  auto in = read_gate_input(t.path + "/merged");
  EXPECT_EQ(in.bench.size(), 16u);  // 8 benchmarks (5 host, 3 GPU) x 2 cells
  // never overwrite; a cell in two bundles is an error; nothing half-written is left
  EXPECT_THROW(merge_runs({t.path + "/b1"}, t.path + "/merged"), Error);
  EXPECT_THROW(merge_runs({t.path + "/b1", t.path + "/b1"}, t.path + "/dup"), Error);
  EXPECT_FALSE(fs::exists(t.path + "/dup"));
}

// A baseline keeps each count's system-library share when the run had it, and refuses a bad one
// by its place in the file.
TEST(Baseline, InstructionCountsKeepTheirLibraryShare) {
  TempDir t;
  GateInput in;
  in.instr = {{"prebuilt", "a/cpu/f32/forward/1", 1000, 250}, {"prebuilt", "b/cpu/f32/forward/1", 2000}};
  const std::string path = t.path + "/base.json";
  files::write_atomic(path, json::dump(baseline_json(in)));
  GateInput back = read_gate_input(path);
  ASSERT_EQ(back.instr.size(), 2u);
  EXPECT_EQ(back.instr[0].library_instructions, 250);
  EXPECT_EQ(back.instr[1].library_instructions, -1);  // not recorded stays not recorded
  json::Value doc = baseline_json(in);
  json::Value bad = doc.get("callgrind").as_array()[0];
  bad.set("library_instructions", -3);
  json::Value list = json::Array{};
  list.push(bad);
  doc.set("callgrind", list);
  files::write_atomic(path, json::dump(doc));
  try {
    read_gate_input(path);
    ADD_FAILURE() << "a negative library count was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("callgrind[0].library_instructions: not a count"), std::string::npos)
        << e.what();
  }
}

TEST(Emit, GithubChunksAt256AndSlurmArray) {
  Plan p;
  p.matrix_path = "matrices/big.toml";
  for (int i = 0; i < 600; ++i) {
    const std::string n = std::to_string(i);
    p.cells.push_back({"id" + n, "c" + n, "pairwise", {}});
  }
  auto gh = emit_github(p, "matrices/big.toml");
  const auto& chunks = gh.get("chunks").as_array();
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[0].get("include").as_array().size(), 256u);
  EXPECT_EQ(chunks[2].get("include").as_array().size(), 600u - 512u);
  EXPECT_EQ(chunks[2].get("include").as_array().back().str("cell"), "id599");
  auto sl = emit_slurm(p, "/x/plan.json", "/x");
  EXPECT_NE(sl.script.find("#SBATCH --array=0-599"), std::string::npos);
  EXPECT_NE(sl.script.find("--cell \"$CELL\""), std::string::npos);
  EXPECT_EQ(std::count(sl.index.begin(), sl.index.end(), '\n'), 600);
  EXPECT_EQ(sl.index.substr(0, 4), "id0\n");
}

int run_opforge(const std::vector<std::string>& args) {
  const char* exe = std::getenv("OPFORGE_EXE");
  if (!exe) return -1;
  std::string cmd = exe;
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " > /dev/null 2>&1";
  int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// The gate as CI calls it: exit 0 against itself, 1 against a 20 % slower run, 2 on bad input.
TEST(GateCli, ExitCodes) {
  if (!std::getenv("OPFORGE_EXE")) GTEST_SKIP() << "OPFORGE_EXE not set (run through meson test)";
  TempDir t;
  write_run(t.path + "/base", "aaaaaaaaaaaa", "prebuilt", 1.0, 1);
  write_run(t.path + "/same", "aaaaaaaaaaaa", "prebuilt", 1.0, 101);
  write_run(t.path + "/slow", "aaaaaaaaaaaa", "prebuilt", 1.2, 201);
  EXPECT_EQ(run_opforge({"gate", "--baseline", t.path + "/base", "--current", t.path + "/base"}), 0);
  EXPECT_EQ(run_opforge({"gate", "--baseline", t.path + "/base", "--current", t.path + "/same"}), 0);
  EXPECT_EQ(run_opforge({"gate", "--baseline", t.path + "/base", "--current", t.path + "/slow"}), 1);
  // a committed-style baseline file works the same
  EXPECT_EQ(run_opforge({"gate", "--current", t.path + "/base", "--write-baseline", t.path + "/base.json"}), 0);
  EXPECT_EQ(run_opforge({"gate", "--current", t.path + "/base", "--write-baseline", t.path + "/base.json"}),
            2);  // no overwrite
  EXPECT_EQ(run_opforge({"gate", "--baseline", t.path + "/base.json", "--current", t.path + "/slow"}), 1);
  EXPECT_EQ(run_opforge({"gate", "--baseline", t.path + "/base.json", "--current", t.path + "/same"}), 0);
  EXPECT_EQ(run_opforge({"gate", "--baseline", t.path + "/missing", "--current", t.path + "/same"}), 2);
  files::write_atomic(t.path + "/junk.json", "{not json");
  EXPECT_EQ(run_opforge({"gate", "--baseline", t.path + "/junk.json", "--current", t.path + "/same"}), 2);
  EXPECT_EQ(run_opforge({"gate", "--current", t.path + "/same"}), 2);  // no baseline
  files::write_atomic(t.path + "/ov.toml",
                      "[[override]]\nmatch = \"prebuilt/layer_norm/*\"\nthreshold = 0.5\nreason = \"test\"\n");
  EXPECT_EQ(run_opforge({"gate", "--baseline", t.path + "/base", "--current", t.path + "/slow", "--overrides",
                         t.path + "/ov.toml"}),
            0);
  files::write_atomic(t.path + "/bad.toml", "[[override]]\nthreshold = 0.5\n");
  EXPECT_EQ(run_opforge({"gate", "--baseline", t.path + "/base", "--current", t.path + "/slow", "--overrides",
                         t.path + "/bad.toml"}),
            2);
}

}  // namespace
}  // namespace opf::matrix
