#include "device_copy_probe.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <map>

#include "opforge/loader.h"

namespace opf::suites {
namespace {

std::map<std::string, double>& measured() {
  static std::map<std::string, double> bw;  // backend -> bytes/s
  return bw;
}

// Two device buffers of the probe's size, freed with the object.
class CopyBuffers {
 public:
  explicit CopyBuffers(Device& d)
      : d_(d), bytes_(std::max(size_t(256) << 20, 4 * d.cache_bytes())), a_(d.alloc(bytes_)), b_(d.alloc(bytes_)) {
    d_.copy(b_, a_, bytes_);  // first touch; contents do not matter to a copy
  }
  ~CopyBuffers() {
    d_.free(a_);
    d_.free(b_);
  }
  CopyBuffers(const CopyBuffers&) = delete;
  CopyBuffers& operator=(const CopyBuffers&) = delete;
  double time_one() {
    return d_.time([&] { d_.copy(b_, a_, bytes_); });
  }
  size_t moved() const { return 2 * bytes_; }

 private:
  Device& d_;
  size_t bytes_;
  void* a_;
  void* b_;
};

void bench_device_copy(benchmark::State& st, const std::string& backend) {
  try {
    CopyBuffers buf(Loader::instance().device(backend));
    double total = 0;
    for (auto _ : st) {
      const double s = buf.time_one();
      st.SetIterationTime(s);
      total += s;
    }
    st.SetBytesProcessed(int64_t(buf.moved()) * int64_t(st.iterations()));
    if (total > 0) measured()[backend] = double(buf.moved()) * double(st.iterations()) / total;
  } catch (const std::exception& e) {
    st.SkipWithError(e.what());
  }
}

}  // namespace

std::string device_probe_name(const std::string& backend) { return "probe/device_copy/" + backend; }

void register_device_probe(const std::string& backend) {
  benchmark::RegisterBenchmark(device_probe_name(backend).c_str(),
                               [backend](benchmark::State& st) { bench_device_copy(st, backend); })
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
}

double device_probe_bandwidth(const std::string& backend) {
  if (auto it = measured().find(backend); it != measured().end()) return it->second;
  CopyBuffers buf(Loader::instance().device(backend));
  double total = 0;
  constexpr int kCopies = 5;
  for (int i = 0; i < kCopies; ++i) total += buf.time_one();
  return measured()[backend] = double(buf.moved()) * kCopies / total;
}

}  // namespace opf::suites
