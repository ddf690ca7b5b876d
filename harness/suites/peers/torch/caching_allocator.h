// A size-keyed cache of freed blocks as torch's CPU allocator, for the torch peers only.
//
// Why: eager ops allocate their outputs and temporaries at every call. libtorch's default CPU
// allocator is posix_memalign, and glibc serves blocks above its mmap threshold (32 MiB at most)
// with fresh mappings, so every call of a large op first-touches its outputs page by page. On
// this project's VMs that costs more than the op: layer_norm 16384x1024 f32, 470 ms per call of
// which 450 ms are page faults, 20 ms once the blocks are reused. PyTorch's CPU performance guide
// has users preload jemalloc or tcmalloc for exactly this; this cache is that, scoped to torch
// (c10::SetCPUAllocator), so our kernels and the other peers keep the process's malloc.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <unordered_map>

namespace opf::suites::peers::torch_peer {

class CachingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) const override {
    const size_t size = (n + kAlign - 1) / kAlign * kAlign;
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = free_.find(size); it != free_.end()) {
        p = it->second;
        free_.erase(it);
      }
    }
    if (!p && size > 0 && !(p = std::aligned_alloc(kAlign, size))) throw std::bad_alloc();
    if (p) {
      std::lock_guard<std::mutex> lock(mu_);
      live_[p] = size;
    }
    // the context is the data pointer itself, as c10's own CPU allocator has it: raw_allocate()
    // (oneDNN's scratch buffers inside ATen's bf16 matmul) asserts exactly that
    return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  // Installed once, before the first torch call of any torch peer; never removed (tensors
  // allocated from it may outlive a peer run).
  // Also returns the cached blocks to the system: a new case should not hold on to the sizes of
  // the previous one.
  static void install() {
    CachingCpuAllocator& a = instance();
    static std::once_flag once;
    std::call_once(once, [&a] { c10::SetCPUAllocator(&a, /*priority above the default's 0*/ 1); });
    std::lock_guard<std::mutex> lock(a.mu_);
    for (auto& [size, p] : a.free_) std::free(p);
    a.free_.clear();
  }

 private:
  static constexpr size_t kAlign = 64;  // c10's own CPU alignment
  static CachingCpuAllocator& instance() {
    // never destroyed: tensors held by static objects are released after static destructors run
    static CachingCpuAllocator& a = *new CachingCpuAllocator;
    return a;
  }
  static void release(void* p) {
    if (!p) return;
    CachingCpuAllocator& a = instance();
    std::lock_guard<std::mutex> lock(a.mu_);
    auto it = a.live_.find(p);
    a.free_.emplace(it->second, p);
    a.live_.erase(it);
  }

  mutable std::mutex mu_;
  mutable std::multimap<size_t, void*> free_;
  mutable std::unordered_map<void*, size_t> live_;  // handed-out blocks and their rounded sizes
};

}  // namespace opf::suites::peers::torch_peer
