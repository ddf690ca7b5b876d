// Scratch memory a thread keeps for its life, one buffer per slot, reused call after call.
// Two reasons not to allocate a kernel's scratch per call or per task:
//  - a large block from malloc costs a page fault per 4 KiB page on first touch, every call;
//  - a heap chunk reused call after call sits on the same physical pages for the life of the
//    process, so an L2-sized scratch lands on different cache sets in every process and a kernel's
//    speed differed by up to +-30 % from one process to the next (softmax_xentropy's row copies).
// Large buffers are therefore one transparent huge page region (2 MiB aligned, MADV_HUGEPAGE):
// physically contiguous where the kernel grants the huge page, so they map onto the cache the same
// way in every process. The price: a use site that ever asks for 64 KiB or more holds 2 MiB (or
// more) per thread that called it, until the thread ends. Contents are garbage on entry.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace opf::cpu {

namespace scratch_detail {
constexpr size_t kHuge = size_t(2) << 20;
constexpr size_t kLarge = size_t(64) << 10;  // from here on, a huge page region
constexpr size_t kPage = 4096;

// Tasks run on the host's pool and must not throw (parallel.h): running out is fatal, and says so.
[[noreturn]] inline void out_of_memory(size_t bytes) {
  std::fprintf(stderr, "opforge: out of memory allocating %zu bytes of kernel scratch\n", bytes);
  std::abort();
}

struct Buffer {
  void* p = nullptr;
  size_t bytes = 0;
  bool mapped = false;
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { release(); }
  void release() {
    if (mapped) ::munmap(p, bytes);
    else std::free(p);
    p = nullptr, bytes = 0, mapped = false;
  }
  void reserve(size_t want) {
    if (want <= bytes) return;
    release();
    if (want >= kLarge) {
      // over-map by one huge page and trim to a 2 MiB-aligned region
      const size_t size = (want + kHuge - 1) / kHuge * kHuge;
      void* raw = ::mmap(nullptr, size + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (raw == MAP_FAILED) out_of_memory(want);
      const uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
      const uintptr_t aligned = (begin + kHuge - 1) / kHuge * kHuge;
      if (aligned > begin) ::munmap(raw, aligned - begin);
      if (const uintptr_t end = begin + size + kHuge; end > aligned + size)
        ::munmap(reinterpret_cast<void*>(aligned + size), end - (aligned + size));
      p = reinterpret_cast<void*>(aligned);
      ::madvise(p, size, MADV_HUGEPAGE);  // (a hint: without THP it is plain pages, still reused)
      bytes = size, mapped = true;
    } else {
      // page-aligned: the same offset within a page in every process, so which loads of it falsely
      // wait on the stores of an output 4 KiB apart (4K aliasing) does not change with the heap
      const size_t size = (want + kPage - 1) / kPage * kPage;
      p = std::aligned_alloc(kPage, size);
      if (!p) out_of_memory(want);
      bytes = size;
    }
  }
};
}  // namespace scratch_detail

// At least n elements of T (page-aligned) in this thread's buffer `slot` of the use site Tag
// (a type of its own per use site: a module, and the helpers it calls on the same thread, must
// never share a buffer); the same memory on every call from this thread until a larger request
// for that slot replaces it.
template <class Tag, size_t kSlots = 1, class T = float>
T* thread_scratch(size_t n, size_t slot = 0) {
  thread_local scratch_detail::Buffer buffers[kSlots];
  scratch_detail::Buffer& b = buffers[slot];
  b.reserve(n * sizeof(T));
  return static_cast<T*>(b.p);
}

}  // namespace opf::cpu
