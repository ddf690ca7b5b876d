// Benchmarks of the Chakra linker and converter at 1x / 10x / 100x (/ 1000x) input sizes,
// with time and peak RSS per node. Inputs are made here from the real traces in chakra/tests/data/traces
// with the project's own tools (scale: replicate the host ET; synth-kineto: seeded Kineto for
// it) and cached under $OPFORGE_CHAKRA_BENCH_DIR (default: /tmp/opf_chakra_bench).
//   link    c102 (host_et_1.0.2, 261 CPU ops per copy) xN + synthetic Kineto  (reference: 514 s at x1000)
//   link    resnet_et (14 k ops, 2 threads) xN + synthetic Kineto             (reference: 97 s at x10)
//   convert hf_GPT2_et (27 k nodes) xN                                        (reference: 5.0 s x1, 47.5 s x10)
// Peak RSS is the process high-water mark reset before each run (/proc/self/clear_refs), so
// it covers that run only.
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <chrono>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "converter.h"
#include "et_scale.h"
#include "kineto_synth.h"
#include "regress.h"
#include "trace_linker.h"

namespace {

namespace fs = std::filesystem;
using namespace opf::chakra;

std::string corpus() { return default_traces_dir(); }

fs::path bench_dir() {
  const char* env = std::getenv("OPFORGE_CHAKRA_BENCH_DIR");
  fs::path p = env && *env ? fs::path(env) : fs::temp_directory_path() / "opf_chakra_bench";
  fs::create_directories(p);
  return p;
}

// Deterministic inputs, made once and reused (the file name carries the generator version).
std::string scaled(const std::string& src, const std::string& tag, int64_t times) {
  fs::path out = bench_dir() / (tag + "_x" + std::to_string(times) + "_v1.json");
  if (!fs::exists(out)) scale_host_et(src, out.string(), times);
  return out.string();
}
std::string synth(const std::string& host) {
  fs::path out = fs::path(host).replace_extension("").string() + "_kineto_s1.json";
  if (!fs::exists(out)) synth_kineto(host, out.string(), 1);
  return out.string();
}

void reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
}
double peak_rss_mb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;
  return 0;
}

double cpu_seconds() {  // user + system time of the process (the tools are single-threaded)
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + 1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

// Per run: wall and CPU time, peak RSS; reported per node too. On a shared machine the CPU
// time is the steadier number; both are printed.
struct Meter {
  double wall = 0, cpu = 0, rss_mb = 0;
  int runs = 0;
  template <class F>
  void run(F&& f) {
    reset_peak_rss();
    const double c0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    cpu += cpu_seconds() - c0;
    rss_mb = std::max(rss_mb, peak_rss_mb());
    ++runs;
  }
  void report(benchmark::State& state, size_t nodes) const {
    const double n = double(std::max<size_t>(nodes, 1)), r = double(std::max(runs, 1));
    state.counters["nodes"] = double(nodes);
    state.counters["wall_s"] = wall / r;
    state.counters["cpu_s"] = cpu / r;
    state.counters["wall_us_per_node"] = wall / r / n * 1e6;
    state.counters["cpu_us_per_node"] = cpu / r / n * 1e6;
    state.counters["peak_rss_MB"] = rss_mb;
    state.counters["rss_KB_per_node"] = rss_mb * 1024.0 / n;
  }
};

// Links `host_trace` replicated state.range(0) times with its synthetic Kineto trace.
void bench_link(benchmark::State& state, const std::string& host_trace, const std::string& label) {
  const int64_t times = state.range(0);
  if (!fs::is_directory(corpus())) {
    state.SkipWithError(("trace corpus " + corpus() + " is missing").c_str());
    return;
  }
  const std::string host = scaled(corpus() + "/" + host_trace, label, times);
  const std::string kineto = synth(host);
  LinkOptions o;
  o.host_path = host;
  o.kineto_path = kineto;
  o.output_path = (bench_dir() / ("linked_" + label + "_x" + std::to_string(times) + ".json")).string();
  LinkStats st;
  Meter m;
  for (auto _ : state) m.run([&] { st = link_traces(o); });
  fs::remove(o.output_path);
  m.report(state, st.kineto_cpu_ops);
  state.counters["host_nodes"] = double(st.host_nodes);
  state.counters["gpu_nodes"] = double(st.gpu_nodes_emitted);
}

void BM_Link(benchmark::State& state) {
  bench_link(state, "mlcommons-chakra/host_et_1.0.2-chakra.0.0.4.json.gz", "c102");
}

// Two threads (forward + autograd) and NCCL broadcast/all_reduce: resnet_et xN (reference: 97 s at x10).
void BM_LinkResnet(benchmark::State& state) { bench_link(state, "facebookresearch-param/resnet_et.json.gz", "resnet"); }

void BM_Convert(benchmark::State& state) {
  const int64_t times = state.range(0);
  if (!fs::is_directory(corpus())) {
    state.SkipWithError(("trace corpus " + corpus() + " is missing").c_str());
    return;
  }
  const std::string in = scaled(corpus() + "/facebookresearch-param/hf_GPT2_et.json.gz", "hf_GPT2", times);
  const std::string out = (bench_dir() / ("hf_GPT2_x" + std::to_string(times) + ".et")).string();
  ConvertOptions opt;
  opt.warn = [](const std::string&) {};
  ConvertStats st;
  Meter m;
  for (auto _ : state) m.run([&] { st = convert(in, out, opt); });
  fs::remove(out);
  m.report(state, st.json_nodes);
}

// Large sizes run once; the short `meson test --benchmark` run filters to x1 and x10.
BENCHMARK(BM_Link)->Arg(1)->Arg(10)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Link)->Arg(100)->Arg(1000)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_LinkResnet)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_LinkResnet)->Arg(10)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Convert)->Arg(1)->Arg(10)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Convert)->Arg(100)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
