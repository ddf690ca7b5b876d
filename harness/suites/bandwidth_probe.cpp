#include "bandwidth_probe.h"

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <map>
#include <memory>
#include <vector>

#include "ab_serve.h"
#include "opforge/threads.h"

namespace opf::suites {
namespace {

constexpr size_t kElems = size_t(1) << 23;  // 64 MiB per array
constexpr double kBytesPerPass = 3.0 * 8.0 * double(kElems);
std::map<int, double> g_mean;  // threads -> bytes/s over the probe's last (longest) run
std::map<int, double> g_best;  // best single pass, as STREAM prints it (informational)

// Slices of the arrays, one task each: page placement and the triad both go through the pool.
struct Arrays {
  std::unique_ptr<double[]> a{new double[kElems]}, b{new double[kElems]}, c{new double[kElems]};
  const opf_host* host;
  int slices;
  explicit Arrays(int threads) : host(host_threads(threads)), slices(threads) {
    for_slices([this](size_t i0, size_t i1) {  // first touch: page faults stay out of the timing
      for (size_t i = i0; i < i1; ++i) {
        a[i] = 0.0;
        b[i] = 1.0 + double(i % 7);
        c[i] = 2.0 - double(i % 5);
      }
    });
  }
  template <class F>
  void for_slices(F&& f) {
    auto task = [&](int64_t t) { f(kElems * size_t(t) / size_t(slices), kElems * size_t(t + 1) / size_t(slices)); };
    if (slices <= 1) return task(0);
    host->parallel_for(
        host, slices, [](void* ctx, int64_t t) { (*static_cast<decltype(task)*>(ctx))(t); }, &task);
  }
  void triad() {
    for_slices([this](size_t i0, size_t i1) {
      double* __restrict pa = a.get();
      const double* __restrict pb = b.get();
      const double* __restrict pc = c.get();
      const double s = 3.0;
      for (size_t i = i0; i < i1; ++i) pa[i] = pb[i] + s * pc[i];
    });
    benchmark::DoNotOptimize(a.get());
    benchmark::ClobberMemory();
  }
};

double timed_triad(Arrays& arr) {
  const auto t0 = std::chrono::steady_clock::now();
  arr.triad();
  const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
  return dt.count();
}

void bm_triad(benchmark::State& st, int threads) {
  Arrays arr(threads);
  arr.triad();
  double total = 0;
  double& best = g_best[threads];
  for (auto _ : st) {
    const double s = timed_triad(arr);
    total += s;
    if (s > 0 && kBytesPerPass / s > best) best = kBytesPerPass / s;
  }
  if (total > 0) g_mean[threads] = kBytesPerPass * double(st.iterations()) / total;
  st.SetBytesProcessed(int64_t(kBytesPerPass) * int64_t(st.iterations()));
  st.counters["best_pass_bytes_per_second"] = best;
  st.counters["threads"] = threads;
}

}  // namespace

std::string probe_name(int threads) { return "probe/stream_triad/threads:" + std::to_string(threads); }

void register_bandwidth_probe(int threads) {
  benchmark::RegisterBenchmark(probe_name(threads).c_str(), [threads](benchmark::State& st) { bm_triad(st, threads); })
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

double probe_bandwidth(int threads) {
  if (auto it = g_mean.find(threads); it != g_mean.end() && it->second > 0) return it->second;
  Arrays arr(threads);
  arr.triad();
  double spent = 0;
  int passes = 0;
  while (passes < 20 && spent < 0.25) {
    spent += timed_triad(arr);
    ++passes;
  }
  g_mean[threads] = kBytesPerPass * passes / spent;
  std::fprintf(stderr, "opforge bench: bandwidth probe (%d threads) filtered out; measured triad now: %.2f GB/s\n",
               threads, g_mean[threads] / 1e9);
  return g_mean[threads];
}

namespace {
std::map<int, std::unique_ptr<Arrays>> g_staged;  // --ab-serve: one set per thread count
}  // namespace

void prepare_probe(int threads) {
  auto& a = g_staged[threads];
  if (!a) {
    a = std::make_unique<Arrays>(threads);
    a->triad();
  }
}

void restage_probe(int threads) {  // two sets, alternating (see kernel_bench.cpp's restage)
  static std::map<int, std::unique_ptr<Arrays>> other;
  prepare_probe(threads);
  if (!other[threads]) {
    other[threads] = std::make_unique<Arrays>(threads);
    other[threads]->triad();
  }
  std::swap(g_staged[threads], other[threads]);
}

double time_probe(int threads, double seconds, int64_t& calls) {
  prepare_probe(threads);
  double spent = 0;
  std::vector<double> each;
  for (calls = 0; calls == 0 || spent < seconds; ++calls) spent += each.emplace_back(timed_triad(*g_staged[threads]));
  return median_ns(each);
}

}  // namespace opf::suites
