// A Device that keeps the blocks a staging frees and hands them to the next staging asking for the
// same size, for the benchmarks only.
//
// Why: every benchmark stages its case afresh (one per thread count, our module and each GPU
// backend), and large host blocks come from fresh mappings (glibc's mmap threshold is 32 MiB at
// most), so each staging of a 100 MB case first-touches every page. On this project's VMs page
// faults cost more than the copies they sit in: they were the largest cost of the benchmark step
// outside the timed loops. The torch peers keep a cache of their own (torch/caching_allocator.h).
// Not thread-safe: the benchmark driver stages from its main thread.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>

#include "opforge/loader.h"

namespace opf::suites {

class RecyclingDevice final : public Device {
 public:
  explicit RecyclingDevice(Device& real) : real_(real) {}
  ~RecyclingDevice() override { trim(); }
  RecyclingDevice(const RecyclingDevice&) = delete;
  RecyclingDevice& operator=(const RecyclingDevice&) = delete;

  void* alloc(size_t bytes) override {
    void* p = nullptr;
    if (auto it = free_.find(bytes); it != free_.end()) {
      p = it->second;
      free_.erase(it);
    } else {
      p = real_.alloc(bytes);
    }
    live_[p] = bytes;
    return p;
  }
  void free(void* p) override {
    auto it = live_.find(p);
    if (it == live_.end()) return real_.free(p);
    free_.emplace(it->second, p);
    live_.erase(it);
  }
  // Returns the cached blocks: a new case should not hold on to the sizes of the previous one.
  void trim() {
    for (auto& [size, p] : free_) real_.free(p);
    free_.clear();
  }

  void to_device(void* dst, const void* src, size_t bytes) override { real_.to_device(dst, src, bytes); }
  void to_host(void* dst, const void* src, size_t bytes) override { real_.to_host(dst, src, bytes); }
  void synchronize() override { real_.synchronize(); }
  std::string describe() const override { return real_.describe(); }
  void copy(void* dst, const void* src, size_t bytes) override { real_.copy(dst, src, bytes); }
  double time(const std::function<void()>& enqueue) override { return real_.time(enqueue); }
  size_t cache_bytes() const override { return real_.cache_bytes(); }

 private:
  Device& real_;
  std::multimap<size_t, void*> free_;
  std::unordered_map<void*, size_t> live_;
};

}  // namespace opf::suites
