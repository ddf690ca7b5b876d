// Host emulation of the CUDA execution model, just enough to run an op's kernel.cu on the CPU:
// this machine has no GPU, and this is how the kernels' indexing, reductions, plans and the
// generic launcher (core/gpu_module.h) are checked against the float64 reference before any
// device run. Not a simulator of performance or memory ordering.
//
// Included (via a generated <op>_emu.cpp) before the op's kernel.cu, compiled by the host C++
// compiler into a shared object that plays the role of a code object: kernels and plans are
// exported under their ABI names and found with dlsym, as the drivers find them by name.
//
// Model: blocks run one after another; the threads of a block are cooperative coroutines
// (ucontext) switched at every barrier, so __syncthreads and warp shuffles are exact, and a
// barrier that only part of the block reaches is detected instead of hanging. OPF_WARP_SIZE is
// set by the build (32: CUDA, 64: CDNA wavefronts).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <vector>

#include "gpu/launch_abi.h"

#ifndef OPF_WARP_SIZE
#error "set OPF_WARP_SIZE (32 or 64) for the emulated module"
#endif

// The CUDA headers already define __device__, __global__, __constant__ and __forceinline__ for
// host compilers; shared memory becomes per-function statics (blocks run one at a time).
#undef __shared__
#define __shared__ static
#define __launch_bounds__(n)
#define OPF_KERNEL extern "C" __attribute__((visibility("default")))

struct opf_emu_dim3 {
  unsigned x, y, z;
};

namespace opf_emu {

inline opf_emu_dim3 thread_idx, block_idx, block_dim, grid_dim;

// Coroutine switching. On x86-64 a six-register stack switch (glibc's swapcontext makes a
// sigprocmask system call per switch, which dominated the suite's time); elsewhere ucontext.
// -DOPF_EMU_UCONTEXT forces the portable path.
#if defined(__x86_64__) && !defined(OPF_EMU_UCONTEXT)
#define OPF_EMU_FAST_SWITCH 1
// opf_emu_switch(save, load): pushes the callee-saved registers, stores rsp in *save, continues
// on stack `load` (which holds the same frame layout).
extern "C" void opf_emu_switch(void** save, void* load);
asm(R"(
  .text
  .p2align 4
  .type opf_emu_switch,@function
opf_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size opf_emu_switch, .-opf_emu_switch
)");
#else
#define OPF_EMU_FAST_SWITCH 0
#endif

struct Thread {
#if OPF_EMU_FAST_SWITCH
  void* sp = nullptr;
#else
  ucontext_t ctx;
#endif
  std::vector<char> stack;
  bool done = false;
};

#if OPF_EMU_FAST_SWITCH
inline void* scheduler_sp = nullptr;
#else
inline ucontext_t scheduler;
#endif
inline std::deque<Thread>* threads = nullptr;
inline unsigned current = 0;
inline void (*kernel)(opf_gpu_args) = nullptr;
inline const opf_gpu_args* kernel_args = nullptr;
inline float exchange[1024];

inline void sync() {  // back to the scheduler, which resumes everyone once all have arrived
#if OPF_EMU_FAST_SWITCH
  opf_emu_switch(&(*threads)[current].sp, scheduler_sp);
#else
  swapcontext(&(*threads)[current].ctx, &scheduler);
#endif
}

inline void thread_main() {
  kernel(*kernel_args);
  (*threads)[current].done = true;
#if OPF_EMU_FAST_SWITCH
  sync();  // never resumed: the scheduler restarts a done thread from scratch
  __builtin_trap();
#endif
}

// Makes t start thread_main() at its next resume.
inline void start(Thread& t) {
  t.done = false;
  if (t.stack.empty()) t.stack.resize(64 * 1024);
#if OPF_EMU_FAST_SWITCH
  // Frame popped by opf_emu_switch: six registers, then `ret` into thread_main with the stack
  // aligned as after a call (rsp % 16 == 8).
  auto top = reinterpret_cast<uintptr_t>(t.stack.data() + t.stack.size()) & ~uintptr_t(15);
  void** sp = reinterpret_cast<void**>(top);
  *--sp = nullptr;  // thread_main's (never used) return address
  *--sp = reinterpret_cast<void*>(&thread_main);
  for (int i = 0; i < 6; ++i) *--sp = nullptr;  // r15 r14 r13 r12 rbx rbp
  t.sp = sp;
#else
  getcontext(&t.ctx);
  t.ctx.uc_stack.ss_sp = t.stack.data();
  t.ctx.uc_stack.ss_size = t.stack.size();
  t.ctx.uc_link = &scheduler;
  makecontext(&t.ctx, thread_main, 0);
#endif
}

inline void resume(Thread& t) {  // runs t until its next barrier or its end
#if OPF_EMU_FAST_SWITCH
  opf_emu_switch(&scheduler_sp, t.sp);
#else
  swapcontext(&scheduler, &t.ctx);
#endif
}

inline float shfl_xor(float v, int lane_mask) {
  exchange[thread_idx.x] = v;
  sync();
  const float r = exchange[thread_idx.x ^ unsigned(lane_mask)];
  sync();
  return r;
}

}  // namespace opf_emu

#define threadIdx opf_emu::thread_idx
#define blockIdx opf_emu::block_idx
#define blockDim opf_emu::block_dim
#define gridDim opf_emu::grid_dim
#define __syncthreads() opf_emu::sync()
#define __shfl_xor_sync(mask, v, lane_mask) opf_emu::shfl_xor((v), (lane_mask))

inline float rsqrtf(float v) { return 1.0f / std::sqrt(v); }

// swapcontext "returns twice" like setjmp, but the scheduler's frame is not modified between
// saving and resuming its context, so nothing is clobbered.
#pragma GCC diagnostic push
#if !defined(__clang__)  // a GCC warning (clang, e.g. under clang-tidy, has no such group)
#pragma GCC diagnostic ignored "-Wclobbered"
#endif
// Runs kernel(*args) on a gx x gy grid of block-thread blocks. Returns 0, or 1 after printing why
// (a barrier reached by only part of a block).
extern "C" __attribute__((visibility("default"))) int opf_emu_launch(void (*kernel)(opf_gpu_args),
                                                                     const opf_gpu_args* args, unsigned gx, unsigned gy,
                                                                     unsigned block) {
  // Kept across launches: allocating and faulting in fresh coroutine stacks dominated the cost.
  // A deque never relocates its elements (a ucontext_t points into itself).
  static std::deque<opf_emu::Thread> threads;
  if (threads.size() < block) threads.resize(block);
  opf_emu::threads = &threads;
  opf_emu::kernel = kernel;
  opf_emu::kernel_args = args;
  opf_emu::grid_dim = {gx, gy, 1};
  opf_emu::block_dim = {block, 1, 1};
  for (unsigned by = 0; by < gy; ++by)
    for (unsigned bx = 0; bx < gx; ++bx) {
      opf_emu::block_idx = {bx, by, 0};
      for (unsigned t = 0; t < block; ++t) opf_emu::start(threads[t]);
      for (;;) {  // one round = every live thread runs to its next barrier or to its end
        unsigned finished = 0;
        for (unsigned t = 0; t < block; ++t) {
          if (threads[t].done) {
            ++finished;
            continue;
          }
          opf_emu::current = t;
          opf_emu::thread_idx = {t, 0, 0};
          opf_emu::resume(threads[t]);
          if (threads[t].done) ++finished;
        }
        if (finished == block) break;
        if (finished != 0) {
          std::fprintf(stderr, "emulated block (%u,%u): %u of %u threads exited while the rest wait at a barrier\n", bx,
                       by, finished, block);
          return 1;
        }
      }
    }
  opf_emu::threads = nullptr;
  return 0;
}
#pragma GCC diagnostic pop
