// scaled_masked_softmax — CPU module (contract, incl. fully masked rows: ref.cpp). Highway SIMD:
// prebuilt modules dispatch on the running CPU; the JIT builds only the host target.
// Rows are split into tasks on the caller's thread pool (cpu/parallel.h); rows are independent,
// so any thread count gives the same bits. Each row is read from memory once and revisited in
// L1/L2:
//   forward: z = scale*x (or -10000 where masked) and its max into an f32 scratch row, then
//            exp(z - max) and its sum in place, then y = e / sum. A fully masked row (no zero byte
//            in its mask row) is written as zeros without computing anything.
//   backward: dot = sum dy*y, then dx = scale*y*(dy - dot) over dy's buffer (in place: each
//            element is read before it is overwritten, and only by its own lane).
// Arithmetic as written: no implicit a*b+c -> fma contraction (GCC's C++ default), so that
// e.g. g*dy - sum(g*dy) is exactly 0 for a one-column row, and every target and the JIT build
// round the same expressions. Explicit fused ops are hn::MulAdd. First line of the TU on purpose:
// every function, Highway's included, must carry the same optimize options to stay inlinable.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif
#ifndef OPF_TUNE_STREAM_MIN_BYTES
#define OPF_TUNE_STREAM_MIN_BYTES (16 << 20)  // outputs this large bypass the cache (~ usable L3)
#endif
#ifndef OPF_SCALED_MASKED_SOFTMAX_CPU_COMMON
#define OPF_SCALED_MASKED_SOFTMAX_CPU_COMMON
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>
#include <type_traits>

#include "cpu/args.h"
#include "cpu/dispatch.h"
#include "cpu/parallel.h"
#include "cpu/scratch.h"
#include "cpu/storage.h"
#include "opforge/module.h"

namespace opf::scaled_masked_softmax_cpu {
constexpr float kMaskedScore = -10000.0f;  // apex's fill for masked scores
constexpr float kExpFloor = -87.0f;        // exp(-87) ~ 1.6e-38: the smallest normal range
struct Forward {
  const opf_host* host;
  int32_t dtype;
  int64_t batch, heads, sq, sk;
  const void* x;
  const uint8_t* mask;
  void* y;
  float scale;
};
struct Backward {
  const opf_host* host;
  int32_t dtype;
  int64_t rows, sk;
  void* dy;  // in: dy, out: dx
  const void* y;
  float scale;
};
}  // namespace opf::scaled_masked_softmax_cpu
#endif  // OPF_SCALED_MASKED_SOFTMAX_CPU_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/scaled_masked_softmax/cpu.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/aligned_allocator.h"
#include "cpu/simd-inl.h"
#include "cpu/exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::scaled_masked_softmax_cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;
using opf::cpu::from_f32;
using opf::cpu::to_f32;

// The rows [r0, r1) of one task. A function of its own, not the lambda's body: captured
// vectors and floats would be reloaded from the closure after every float store (a float
// store may alias them).
struct RowScratch;  // a task's f32 row (cpu/scratch.h)

template <class S>
HWY_NOINLINE void ForwardRows(const Forward& a, bool stream, int64_t r0, int64_t r1) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d), n = size_t(a.sk);
  const auto vscale = hn::Set(d, a.scale), vmasked = hn::Set(d, kMaskedScore);

  float* const z = opf::cpu::thread_scratch<RowScratch>(n);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t bi = r / (a.heads * a.sq), si = r % a.sq;
    const uint8_t* m = a.mask + (bi * a.sq + si) * a.sk;
    const S* x = static_cast<const S*>(a.x) + r * a.sk;
    S* y = static_cast<S*>(a.y) + r * a.sk;
    if (std::memchr(m, 0, n) == nullptr) {  // fully masked: all zeros (bit pattern 0 in every dtype)
      std::memset(static_cast<void*>(y), 0, n * sizeof(S));
      continue;
    }
    auto vmax = hn::Set(d, -hwy::HighestValue<float>());
    auto probe = hn::Zero(d);  // stays 0 unless a score is NaN or infinite (score * 0)
    size_t j = 0;
    for (; j + N <= n; j += N) {
      const auto v = hn::IfThenElse(LoadMaskU8(d, m + j), vmasked, hn::Mul(LoadWiden(d, x + j), vscale));
      hn::Store(v, d, z + j);
      vmax = hn::Max(vmax, v);
      probe = hn::MulAdd(v, hn::Zero(d), probe);
    }
    float mx = MaxLanes(d, vmax);
    bool special = !(SumLanes(d, probe) == 0.0f);
    OPF_SCALAR_LOOP
    for (; j < n; ++j) {
      z[j] = m[j] ? kMaskedScore : to_f32(x[j]) * a.scale;
      mx = std::max(mx, z[j]);
      special |= !std::isfinite(z[j]);
    }
    // As the reference: a NaN score, or a maximum of +inf (inf - inf) or -inf (every score -inf),
    // makes the whole row NaN; SIMD max and the exp clamp below would quietly drop a NaN.
    if (special && (!std::isfinite(mx) || std::any_of(z, z + n, [](float v) { return std::isnan(v); }))) {
      for (size_t k = 0; k < n; ++k) y[k] = from_f32<S>(std::numeric_limits<float>::quiet_NaN());
      continue;
    }

    // exp(t) for t < kExpFloor is below FLT_MIN: flushed to 0 rather than computed as a
    // subnormal (masked entries, t ~ -10000, are common; subnormal arithmetic is slow)
    const auto vmx = hn::Set(d, mx), vfloor = hn::Set(d, kExpFloor);
    auto s0 = hn::Zero(d);
    // passes 2 and 3 run from cache: fetch the next row meanwhile
    const int64_t next = r + 1 < r1 ? a.sk : 0;
    const uint8_t* m_next = a.mask + (((r + 1) / (a.heads * a.sq)) * a.sq + (r + 1) % a.sq) * a.sk;
    if (next == 0) m_next = m;
    for (j = 0; j + N <= n; j += N) {
      PrefetchSpan(x + next + j, N);
      if (!stream) PrefetchSpanForWrite(y + next + j, N);
      if (j % 64 == 0) PrefetchSpan(m_next + j, 1);
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
  }
  if (stream) hwy::FlushStream();  // every thread orders its own streaming stores
}

template <class S>
void ForwardT(const Forward& a) {
  const size_t n = size_t(a.sk);
  const int64_t rows = a.batch * a.heads * a.sq;
  const bool stream = double(rows) * double(n) * sizeof(S) >= double(OPF_TUNE_STREAM_MIN_BYTES);
  const int64_t chunk = opf::cpu::rows_per_task(rows, 2.0 * double(n) * sizeof(S));
  opf::cpu::parallel_rows(a.host, rows, chunk, [&](int64_t r0, int64_t r1) { ForwardRows<S>(a, stream, r0, r1); });
}

// The rows [r0, r1) of one task. A function of its own, not the lambda's body: captured
// vectors and floats would be reloaded from the closure after every float store (a float
// store may alias them).
template <class S>
HWY_NOINLINE void BackwardRows(const Backward& a, int64_t r0, int64_t r1) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d), n = size_t(a.sk);
  const auto vscale = hn::Set(d, a.scale);

  for (int64_t r = r0; r < r1; ++r) {
    S* dy = static_cast<S*>(a.dy) + r * a.sk;
    const S* y = static_cast<const S*>(a.y) + r * a.sk;
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
    const int64_t next = r + 1 < r1 ? a.sk : 0;  // this pass runs from cache: fetch the next row
    for (j = 0; j + N <= n; j += N) {
      PrefetchSpan(dy + next + j, N);
      PrefetchSpan(y + next + j, N);
      const auto yv = LoadWiden(d, y + j);
      StoreRound(d, hn::Mul(hn::Mul(vscale, yv), hn::Sub(LoadWiden(d, dy + j), vdot)), dy + j);
    }
    OPF_SCALAR_LOOP
    for (; j < n; ++j) dy[j] = from_f32<S>(a.scale * to_f32(y[j]) * (to_f32(dy[j]) - dot));
  }
}

template <class S>
void BackwardT(const Backward& a) {
  const size_t n = size_t(a.sk);
  const int64_t chunk = opf::cpu::rows_per_task(a.rows, 3.0 * double(n) * sizeof(S));
  opf::cpu::parallel_rows(a.host, a.rows, chunk, [&](int64_t r0, int64_t r1) { BackwardRows<S>(a, r0, r1); });
}

OPF_CPU_TARGET_ENTRIES()

}  // namespace opf::scaled_masked_softmax_cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::scaled_masked_softmax_cpu {
OPF_CPU_EXPORT_ENTRIES()
}  // namespace opf::scaled_masked_softmax_cpu
#endif  // HWY_ONCE

#if HWY_ONCE && OPF_HOST_PART  // the host code: not in a JIT kernels module (cpu/dispatch.h)
OPF_HOST_CODE_BEGIN
namespace opf::scaled_masked_softmax_cpu {
using namespace opf::cpu;

void call(const opf_call* c, bool execute) {
  const std::string_view entry = c->entry ? c->entry : "";
  if (entry == "forward") {
    const Args args(c, 3, 1);
    const float scale = float(args.f64(0, "scale"));
    const opf_tensor& x = expect_lead(args, 0, "x", 4, "[b, np, sq, sk]");
    const int64_t b = x.shape[0], np = x.shape[1], sq = x.shape[2], sk = x.shape[3];
    Forward a{c->host,
              x.dtype,
              b,
              np,
              sq,
              sk,
              x.data,
              static_cast<const uint8_t*>(expect_arg(args, 1, "mask", OPF_U8, {b, 1, sq, sk}).data),
              expect_arg(args, 2, "y", x.dtype, {b, np, sq, sk}).data,
              scale};
    if (execute && sk > 0) OPF_DISPATCH(RunForward)(a);
  } else if (entry == "backward") {
    const Args args(c, 2, 1);
    const float scale = float(args.f64(0, "scale"));
    const opf_tensor& dy = expect_lead(args, 0, "dy", 4, "[b, np, sq, sk]");
    const int64_t b = dy.shape[0], np = dy.shape[1], sq = dy.shape[2], sk = dy.shape[3];
    Backward a{c->host, dy.dtype, b * np * sq, sk, dy.data, expect_arg(args, 1, "y", dy.dtype, {b, np, sq, sk}).data,
               scale};
    if (execute && sk > 0) OPF_DISPATCH(RunBackward)(a);
  } else {
    failf("unknown entry '%.40s' (scaled_masked_softmax has forward, backward)", c->entry ? c->entry : "");
  }
}

}  // namespace opf::scaled_masked_softmax_cpu

OPF_DEFINE_MODULE("scaled_masked_softmax", "cpu", opf::scaled_masked_softmax_cpu::isa(),
                  opf::scaled_masked_softmax_cpu::call)
OPF_HOST_CODE_END
#endif  // HWY_ONCE
