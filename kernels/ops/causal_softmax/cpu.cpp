// causal_softmax — CPU module (contract: ref.cpp). Highway SIMD: prebuilt modules dispatch on the
// running CPU; the JIT builds only the host target.
// Rows are split into tasks on the caller's thread pool (cpu/parallel.h); rows are independent and
// a task's boundaries depend on the shape alone, so any thread count gives the same bits. Row i
// of a batch keeps keep = i + 1 columns; only those are read, once from memory, and revisited in
// L1/L2; the masked rest of the output is written as zeros without being read (streaming stores
// for outputs beyond the cache, which would otherwise read each line before overwriting it):
//   forward: z = scale*x and its max into an f32 scratch row, exp(z - max) and its sum in place,
//            then y = e / sum, then the zeros.
//   backward: dot = sum dy*y over the kept part, dx = scale*y*(dy - dot) over dy's buffer (in
//            place: each element is read before it is overwritten, and only by its own lane), then
//            the zeros.
// Arithmetic as written: no implicit a*b+c -> fma contraction (GCC's C++ default), so that every
// target and the JIT build round the same expressions (a one-column row's dx is exactly 0).
// Explicit fused ops are hn::MulAdd. First line of the TU on purpose: every function, Highway's
// included, must carry the same optimize options to stay inlinable.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif
#ifndef OPF_TUNE_STREAM_MIN_BYTES
#define OPF_TUNE_STREAM_MIN_BYTES (16 << 20)  // outputs this large bypass the cache (~ usable L3)
#endif
#ifndef OPF_CAUSAL_SOFTMAX_CPU_COMMON
#define OPF_CAUSAL_SOFTMAX_CPU_COMMON
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>

#include "cpu/args.h"
#include "cpu/dispatch.h"
#include "cpu/parallel.h"
#include "cpu/scratch.h"
#include "cpu/storage.h"
#include "opforge/module.h"

namespace opf::causal_softmax_cpu {
struct Forward {
  const opf_host* host;
  int32_t dtype;
  int64_t batches, sq;  // sk == sq
  const void* x;
  void* y;
  float scale;
};
struct Backward {
  const opf_host* host;
  int32_t dtype;
  int64_t batches, sq;
  void* dy;  // in: dy, out: dx
  const void* y;
  float scale;
};
}  // namespace opf::causal_softmax_cpu
#endif  // OPF_CAUSAL_SOFTMAX_CPU_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/causal_softmax/cpu.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/aligned_allocator.h"
#include "cpu/simd-inl.h"
#include "cpu/exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::causal_softmax_cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;
using opf::cpu::from_f32;
using opf::cpu::to_f32;

// bytes [p, p + n) = 0 around streaming stores. A vector or masked store there (what glibc's
// memset does under 64 bytes) stalls the streaming stores after it on this AMD EPYC: the forward at
// 64x512x512 f32 ran 10.0-10.5 ms under clang, which calls memset here, against 7.0-7.6 under GCC,
// which inlines it as rep stos; with rep stosb clang's took 7.4 (standalone, 1 thread). So clang
// gets rep stosb; GCC keeps its own expansion (rep stosb in its place measured up to 1.12x slower).
HWY_INLINE void ZeroBytes(char* p, size_t n) {
#if HWY_ARCH_X86 && HWY_COMPILER_CLANG
  if (n == 0) return;  // (rep's start-up is not free)
  asm volatile("rep stosb" : "+D"(p), "+c"(n) : "a"(0) : "memory");
#else
  std::memset(p, 0, n);
#endif
}

// y[0, n) = 0 (the bit pattern 0 in every storage dtype). stream: the vector-aligned body with
// non-temporal stores, so that the zeros do not first read the lines they overwrite.
template <class S>
HWY_INLINE void ZeroSpan(S* y, size_t n, bool stream) {
  char* p = reinterpret_cast<char*>(y);
  size_t bytes = n * sizeof(S);
  if constexpr (kCanStream<float>) {
    const hn::ScalableTag<uint8_t> du8;
    const size_t V = hn::Lanes(du8);
    if (stream && bytes >= 2 * V) {
      const size_t head = (V - reinterpret_cast<uintptr_t>(p) % V) % V;
      ZeroBytes(p, head);
      p += head;
      bytes -= head;
      const auto zero = hn::Zero(du8);
      for (; bytes >= V; p += V, bytes -= V) hn::Stream(zero, du8, reinterpret_cast<uint8_t*>(p));
    }
  }
  ZeroBytes(p, bytes);
}

// The rows [r0, r1) of one task. A function of its own, not the lambda's body: captured
// vectors and floats would be reloaded from the closure after every float store (a float
// store may alias them).
struct RowScratch;  // a task's f32 row (cpu/scratch.h)

template <class S>
HWY_NOINLINE void ForwardRows(const Forward& a, bool stream, int64_t r0, int64_t r1) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d), sk = size_t(a.sq);
  const auto vscale = hn::Set(d, a.scale);

  float* const z = opf::cpu::thread_scratch<RowScratch>(sk);
  for (int64_t r = r0; r < r1; ++r) {
    const size_t n = size_t(r % a.sq) + 1;  // kept columns
    const S* x = static_cast<const S*>(a.x) + r * a.sq;
    S* y = static_cast<S*>(a.y) + r * a.sq;
    auto vmax = hn::Set(d, -hwy::HighestValue<float>());
    auto probe = hn::Zero(d);  // stays 0 unless a score is NaN or infinite (score * 0)
    size_t j = 0;
    for (; j + N <= n; j += N) {
      const auto v = hn::Mul(LoadWiden(d, x + j), vscale);
      hn::Store(v, d, z + j);
      vmax = hn::Max(vmax, v);
      probe = hn::MulAdd(v, hn::Zero(d), probe);
    }
    float mx = MaxLanes(d, vmax);
    bool special = !(SumLanes(d, probe) == 0.0f);
    OPF_SCALAR_LOOP
    for (; j < n; ++j) {
      z[j] = to_f32(x[j]) * a.scale;
      mx = std::max(mx, z[j]);
      special |= !std::isfinite(z[j]);
    }
    // As the reference: a NaN score, or a maximum of +inf (inf - inf) or -inf (every score
    // -inf), makes the kept part NaN; SIMD max and the exp floor below would quietly drop a NaN.
    if (special && (!std::isfinite(mx) || std::any_of(z, z + n, [](float v) { return std::isnan(v); }))) {
      for (size_t k = 0; k < n; ++k) y[k] = from_f32<S>(std::numeric_limits<float>::quiet_NaN());
      ZeroSpan(y + n, sk - n, stream);
      continue;
    }

    // exp(t) for t < kExpFloor is below FLT_MIN: flushed to 0 rather than computed as a
    // subnormal (the same bits on every target; subnormal arithmetic is slow)
    const auto vmx = hn::Set(d, mx), vfloor = hn::Set(d, kExpFloor);
    auto s0 = hn::Zero(d);
    // the passes below run from cache: fetch the next row's kept part (one more column) meanwhile
    const bool more = r + 1 < r1;
    const S* x_next = x + a.sq;
    for (j = 0; j + N <= n; j += N) {
      if (more) PrefetchSpan(x_next + j, N);
      const auto t = hn::Sub(hn::Load(d, z + j), vmx);
      const auto e = hn::IfThenZeroElse(hn::Lt(t, vfloor), ExpFast(d, t));
      hn::Store(e, d, z + j);
      s0 = hn::Add(s0, e);
    }
    float sum = SumLanes(d, s0);
    OPF_SCALAR_LOOP
    for (; j < n; ++j) sum += (z[j] = z[j] - mx < kExpFloor ? 0.0f : std::exp(z[j] - mx));

    const float inv = 1.0f / sum;
    const auto vinv = hn::Set(d, inv);
    WriteRow(
        d, y, n, stream, [&](size_t k) { return hn::Mul(hn::LoadU(d, z + k), vinv); },
        [&](size_t k) { return z[k] * inv; });
    ZeroSpan(y + n, sk - n, stream);
  }
  if (stream) hwy::FlushStream();  // every thread orders its own streaming stores
}

// Task boundaries from the shape alone: rows of about 256 KiB of traffic at full row length.
template <class S>
void ForwardT(const Forward& a) {
  const int64_t rows = a.batches * a.sq;
  const double row_bytes = double(a.sq) * sizeof(S);
  const bool stream = double(rows) * row_bytes >= double(OPF_TUNE_STREAM_MIN_BYTES);
  const int64_t chunk = opf::cpu::rows_per_task(rows, 2.0 * row_bytes);
  opf::cpu::parallel_rows(a.host, rows, chunk, [&](int64_t r0, int64_t r1) { ForwardRows<S>(a, stream, r0, r1); });
}

template <class S>
HWY_NOINLINE void BackwardRows(const Backward& a, bool stream, int64_t r0, int64_t r1) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d), sk = size_t(a.sq);
  const auto vscale = hn::Set(d, a.scale);

  for (int64_t r = r0; r < r1; ++r) {
    const size_t n = size_t(r % a.sq) + 1;
    S* dy = static_cast<S*>(a.dy) + r * a.sq;
    const S* y = static_cast<const S*>(a.y) + r * a.sq;
    auto s0 = hn::Zero(d), s1 = hn::Zero(d);
    size_t j = 0;
    for (; j + 2 * N <= n; j += 2 * N) {
      s0 = hn::MulAdd(LoadWiden(d, dy + j), LoadWiden(d, y + j), s0);
      s1 = hn::MulAdd(LoadWiden(d, dy + j + N), LoadWiden(d, y + j + N), s1);
    }
    for (; j + N <= n; j += N) s0 = hn::MulAdd(LoadWiden(d, dy + j), LoadWiden(d, y + j), s0);
    float dot = SumLanes(d, hn::Add(s0, s1));
    OPF_SCALAR_LOOP
    for (; j < n; ++j) dot += to_f32(dy[j]) * to_f32(y[j]);

    const auto vdot = hn::Set(d, dot);
    const bool more = r + 1 < r1;  // this pass runs from cache: fetch the next row meanwhile
    for (j = 0; j + N <= n; j += N) {
      if (more) {
        PrefetchSpan(dy + sk + j, N);
        PrefetchSpan(y + sk + j, N);
      }
      const auto yv = LoadWiden(d, y + j);
      StoreRound(d, hn::Mul(hn::Mul(vscale, yv), hn::Sub(LoadWiden(d, dy + j), vdot)), dy + j);
    }
    OPF_SCALAR_LOOP
    for (; j < n; ++j) dy[j] = from_f32<S>(a.scale * to_f32(y[j]) * (to_f32(dy[j]) - dot));
    ZeroSpan(dy + n, sk - n, stream);
  }
  if (stream) hwy::FlushStream();
}

template <class S>
void BackwardT(const Backward& a) {
  const int64_t rows = a.batches * a.sq;
  const double row_bytes = double(a.sq) * sizeof(S);
  const bool stream = double(rows) * row_bytes >= double(OPF_TUNE_STREAM_MIN_BYTES);
  const int64_t chunk = opf::cpu::rows_per_task(rows, 3.0 * row_bytes);
  opf::cpu::parallel_rows(a.host, rows, chunk, [&](int64_t r0, int64_t r1) { BackwardRows<S>(a, stream, r0, r1); });
}

OPF_CPU_TARGET_ENTRIES()

}  // namespace opf::causal_softmax_cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::causal_softmax_cpu {
OPF_CPU_EXPORT_ENTRIES()
}  // namespace opf::causal_softmax_cpu
#endif  // HWY_ONCE

#if HWY_ONCE && OPF_HOST_PART  // the host code: not in a JIT kernels module (cpu/dispatch.h)
OPF_HOST_CODE_BEGIN
namespace opf::causal_softmax_cpu {
using namespace opf::cpu;

// The leading [attn_batches, sq, sk] tensor, with sq == sk.
const opf_tensor& expect_square(const Args& args, int i, const char* name) {
  const opf_tensor& t = expect_lead(args, i, name, 3, "[attn_batches, sq, sk]");
  if (t.shape[1] != t.shape[2])
    failf("%s: argument %d (%s) has sq = %lld and sk = %lld; the causal mask needs sq == sk", args.entry(), i, name,
          (long long)t.shape[1], (long long)t.shape[2]);
  return t;
}

void call(const opf_call* c, bool execute) {
  const std::string_view entry = c->entry ? c->entry : "";
  if (entry == "forward") {
    const Args args(c, 2, 1);
    const float scale = float(args.f64(0, "scale"));
    const opf_tensor& x = expect_square(args, 0, "x");
    const int64_t b = x.shape[0], s = x.shape[1];
    if (x.data == nullptr && b * s > 0) failf("forward: argument 0 (x) has no data");
    Forward a{c->host, x.dtype, b, s, x.data, expect_arg(args, 1, "y", x.dtype, {b, s, s}).data, scale};
    if (execute && b * s > 0) OPF_DISPATCH(RunForward)(a);
  } else if (entry == "backward") {
    const Args args(c, 2, 1);
    const float scale = float(args.f64(0, "scale"));
    const opf_tensor& dy = expect_square(args, 0, "dy");
    const int64_t b = dy.shape[0], s = dy.shape[1];
    if (dy.data == nullptr && b * s > 0) failf("backward: argument 0 (dy) has no data");
    Backward a{c->host, dy.dtype, b, s, dy.data, expect_arg(args, 1, "y", dy.dtype, {b, s, s}).data, scale};
    if (execute && b * s > 0) OPF_DISPATCH(RunBackward)(a);
  } else {
    failf("unknown entry '%.40s' (causal_softmax has forward, backward)", c->entry ? c->entry : "");
  }
}

}  // namespace opf::causal_softmax_cpu

OPF_DEFINE_MODULE("causal_softmax", "cpu", opf::causal_softmax_cpu::isa(), opf::causal_softmax_cpu::call)
OPF_HOST_CODE_END
#endif  // HWY_ONCE
