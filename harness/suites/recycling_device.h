// A Device that keeps the blocks a staging frees and hands them to the next staging asking for the
// same size, for the benchmarks only.
//
// Why: every benchmark stages its case afresh (one per thread count, our module and each GPU
// backend), and large host blocks come from fresh mappings (glibc's mmap threshold is 32 MiB at
// most), so each staging of a 100 MB case first-touches every page. On this project's VMs page
// faults cost more than the copies they sit in: they were the largest cost of the benchmark step
// outside the timed loops. The torch peers keep a cache of their own (torch/caching_allocator.h).
//
// Host blocks (host_mappings) are also placed the same way in every process: a block of 1 MiB or
// more in a mapping of its own, 2 MiB aligned and advised onto transparent huge pages, a smaller
// one page-aligned (a mapping each would cost 2 MiB per block: fused_adam's lists of 1,000
// tensors, 3 stagings, ran out of memory). From malloc, a block's address depends on the heap's
// history and on ASLR, and with it which of the case's blocks alias each other in the caches (4K
// aliasing) and which share a huge page; a process could run a channels-last syncbn benchmark
// 10-40 % faster or slower than another process running the same code for as long as it lived,
// which `opforge ab` read as a regression (issue 13's A/A runs).
// Not thread-safe: the benchmark driver stages from its main thread.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>

#include "opforge/error.h"
#include "opforge/loader.h"

namespace opf::suites {

class RecyclingDevice final : public Device {
 public:
  RecyclingDevice(Device& real, bool host_mappings) : real_(real), host_mappings_(host_mappings) {}
  ~RecyclingDevice() override { trim(); }
  RecyclingDevice(const RecyclingDevice&) = delete;
  RecyclingDevice& operator=(const RecyclingDevice&) = delete;

  void* alloc(size_t bytes) override {
    void* p = nullptr;
    if (auto it = free_.find(bytes); it != free_.end()) {
      p = it->second;
      free_.erase(it);
    } else {
      p = host_mappings_ ? host_block(bytes) : real_.alloc(bytes);
    }
    live_[p] = bytes;
    return p;
  }
  void free(void* p) override {
    auto it = live_.find(p);
    if (it == live_.end()) return real_.free(p);  // not one of ours
    free_.emplace(it->second, p);
    live_.erase(it);
  }
  // Returns the cached blocks: a new case should not hold on to the sizes of the previous one.
  void trim() {
    for (auto& [size, p] : free_) host_mappings_ ? free_host_block(p, size) : real_.free(p);
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
  static constexpr size_t kHuge = size_t(2) << 20;
  static constexpr size_t kPage = 4096;
  static size_t mapped_size(size_t bytes) { return (bytes + kHuge - 1) / kHuge * kHuge; }
  static bool mapped(size_t bytes) { return bytes >= kHuge / 2; }
  static void free_host_block(void* p, size_t bytes) {
    if (mapped(bytes)) ::munmap(p, mapped_size(bytes));
    else std::free(p);
  }
  static void* host_block(size_t bytes) {
    if (!mapped(bytes)) {
      void* p = std::aligned_alloc(kPage, (bytes + kPage) / kPage * kPage);  // (never 0 bytes)
      if (!p) throw Error("bench: out of host memory allocating " + std::to_string(bytes) + " bytes");
      return p;
    }
    const size_t size = mapped_size(bytes);
    // over-map by one huge page, keep the 2 MiB-aligned part
    void* raw = ::mmap(nullptr, size + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw Error("bench: out of host memory mapping " + std::to_string(bytes) + " bytes");
    const uintptr_t begin = reinterpret_cast<uintptr_t>(raw), end = begin + size + kHuge;
    const uintptr_t aligned = (begin + kHuge - 1) / kHuge * kHuge;
    if (aligned > begin) ::munmap(raw, aligned - begin);
    if (end > aligned + size) ::munmap(reinterpret_cast<void*>(aligned + size), end - (aligned + size));
    ::madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE);  // a hint; without THP still aligned
    return reinterpret_cast<void*>(aligned);
  }

  Device& real_;
  const bool host_mappings_;
  std::multimap<size_t, void*> free_;
  std::unordered_map<void*, size_t> live_;
};

}  // namespace opf::suites
