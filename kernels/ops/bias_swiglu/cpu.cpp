// bias_swiglu — CPU module (contract: ref.cpp). Highway SIMD: prebuilt modules dispatch on the
// running CPU; the JIT builds only the host target.
// One pass over memory: a row of x (both halves) and of dy is read once; its outputs are computed
// in f32 into a scratch row (L1/L2) and written from there (streaming stores for outputs beyond
// the cache), and the backward adds the same f32 dx into the column partials of dbias.
//   forward: rows split into tasks on the caller's thread pool; rows are independent.
//   backward: dbias through cpu/parallel.h parallel_column_sums: tasks of whole reduce_rows-row
//            blocks fixed by N alone, f32 partials over one block, f64 totals per task, added in
//            task order: the same bits for any thread count.
// Every column takes the vector path (a row's tail through a padded vector), so a column's math
// does not depend on where it falls in the row. Arithmetic as written: no implicit a*b+c -> fma
// contraction, so that every target and the JIT round the same expressions; first line of the TU
// on purpose (every function, Highway's included, must carry the same optimize options).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif
#ifndef OPF_TUNE_STREAM_MIN_BYTES
#define OPF_TUNE_STREAM_MIN_BYTES (16 << 20)  // outputs this large bypass the cache (~ usable L3)
#endif
#ifndef OPF_TUNE_REDUCE_ROWS
#define OPF_TUNE_REDUCE_ROWS 32  // rows per f32 partial of dbias before it is added in f64
#endif
#ifndef OPF_BIAS_SWIGLU_CPU_COMMON
#define OPF_BIAS_SWIGLU_CPU_COMMON
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "cpu/args.h"
#include "cpu/dispatch.h"
#include "cpu/parallel.h"
#include "cpu/scratch.h"
#include "cpu/storage.h"
#include "opforge/module.h"

namespace opf::bias_swiglu_cpu {
struct Forward {
  const opf_host* host;
  int32_t dtype;
  int64_t rows, h;  // x is [rows, 2h]
  const void* x;
  const void* bias;
  void* y;
};
struct Backward {
  const opf_host* host;
  int32_t dtype;
  int64_t rows, h;
  const void* dy;
  const void* x;
  const void* bias;
  void* dx;
  void* dbias;
};
}  // namespace opf::bias_swiglu_cpu
#endif  // OPF_BIAS_SWIGLU_CPU_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/bias_swiglu/cpu.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/aligned_allocator.h"
#include "cpu/simd-inl.h"
#include "cpu/exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::bias_swiglu_cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;
using opf::cpu::from_f32;
using opf::cpu::to_f32;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// s(a) = 1 / (1 + exp(-a)) and 1 - s(a), both without cancellation or overflow: from
// e = exp(-|a|) in (0, 1], s = 1 / (1 + e) and 1 - s = e / (1 + e) for a >= 0, swapped for a < 0.
// exp below FLT_MIN (|a| > 87) is 0, so a saturated side is exactly 0 or 1 (silu(-1e6) = -0,
// not a clamped exp's 1e6 * 6e-39), and no subnormal arithmetic runs.
struct Sig {
  VF s, t;  // s(a), 1 - s(a)
};
HWY_INLINE Sig Sigmoid(DF d, VF a) {
  const auto m = hn::Neg(hn::Abs(a));
  const auto e = hn::IfThenZeroElse(hn::Lt(m, hn::Set(d, kExpFloor)), ExpClamped(d, m));
  const auto one = hn::Set(d, 1.0f);
  const auto r = hn::Div(one, hn::Add(one, e)), er = hn::Mul(e, r);
  const auto neg = hn::Lt(a, hn::Zero(d));
  return {hn::IfThenElse(neg, er, r), hn::IfThenElse(neg, r, er)};
}

// src[0, n) widened to f32 into dst (the bias once per call, and row tails).
template <class S>
HWY_INLINE void Widen(const S* src, float* dst, size_t n) {
  for (size_t k = 0; k < n; ++k) dst[k] = to_f32(src[k]);
}

// Calls body(j, n) for the columns [j, j + n) of a row of h, n = N but for the last (h % N) call.
// The body loads with LoadPart*/StorePartF, which take a short tail through zero-padded vectors,
// so every column takes the same vector arithmetic.
template <class Body>
HWY_INLINE void ForColumns(DF d, size_t h, Body&& body) {
  const size_t N = hn::Lanes(d);
  size_t j = 0;
  for (; j + N <= h; j += N) body(j, N);
  if (j < h) body(j, h - j);
}

constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);  // this target's (bounds n for the compiler)

// A vector of n <= N elements of p (storage S) widened to f32; lanes past n are 0.
template <class S>
HWY_INLINE VF LoadPart(DF d, const S* p, size_t n) {
  if (n == hn::Lanes(d)) return LoadWiden(d, p);
  HWY_ALIGN float buf[kMaxLanes] = {};
  Widen(p, buf, std::min(n, kMaxLanes));
  return hn::Load(d, buf);
}
HWY_INLINE VF LoadPartF(DF d, const float* p, size_t n) {
  if (n == hn::Lanes(d)) return hn::LoadU(d, p);
  HWY_ALIGN float buf[kMaxLanes] = {};
  std::memcpy(buf, p, std::min(n, kMaxLanes) * sizeof(float));
  return hn::Load(d, buf);
}
HWY_INLINE void StorePartF(DF d, VF v, float* p, size_t n) {
  if (n == hn::Lanes(d)) return hn::StoreU(v, d, p);
  HWY_ALIGN float buf[kMaxLanes];
  hn::Store(v, d, buf);
  std::memcpy(p, buf, std::min(n, kMaxLanes) * sizeof(float));
}

// Each task's f32 row buffer: this thread's, reused call after call (cpu/scratch.h).
struct ForwardRowsScratch;
struct BackwardRowsScratch;

// The rows [r0, r1) of one task. A function of its own, not the lambda's body: captured
// vectors and floats would be reloaded from the closure after every float store (a float
// store may alias them).
template <class S>
HWY_NOINLINE void ForwardRows(const Forward& a, const float* bias, bool stream, int64_t r0, int64_t r1) {
  const DF d;
  const size_t h = size_t(a.h);
  float* out = opf::cpu::thread_scratch<ForwardRowsScratch>(h);
  for (int64_t r = r0; r < r1; ++r) {
    const S* x = static_cast<const S*>(a.x) + r * 2 * a.h;
    S* y = static_cast<S*>(a.y) + r * a.h;
    const S* x_next = r + 1 < r1 ? x + 2 * h : x;  // this row's pass also fetches the next row
    ForColumns(d, h, [&](size_t j, size_t n) {
      PrefetchSpan(x_next + j, n);
      PrefetchSpan(x_next + h + j, n);
      const auto va = hn::Add(LoadPart(d, x + j, n), LoadPartF(d, bias + j, n));
      const auto vc = hn::Add(LoadPart(d, x + h + j, n), LoadPartF(d, bias + h + j, n));
      const Sig s = Sigmoid(d, va);
      StorePartF(d, hn::Mul(hn::Mul(va, s.s), vc), out + j, n);
    });
    WriteRow(
        d, y, h, stream, [&](size_t k) { return hn::LoadU(d, out + k); }, [&](size_t k) { return out[k]; });
  }
  if (stream) hwy::FlushStream();  // every thread orders its own streaming stores
}

template <class S>
void ForwardT(const Forward& a) {
  const size_t h = size_t(a.h);
  auto bias = hwy::AllocateAligned<float>(2 * h);
  Widen(static_cast<const S*>(a.bias), bias.get(), 2 * h);
  const bool stream = double(a.rows) * double(h) * sizeof(S) >= double(OPF_TUNE_STREAM_MIN_BYTES);
  const int64_t chunk = opf::cpu::rows_per_task(a.rows, 3.0 * double(h) * sizeof(S));
  opf::cpu::parallel_rows(a.host, a.rows, chunk,
                          [&](int64_t r0, int64_t r1) { ForwardRows<S>(a, bias.get(), stream, r0, r1); });
}

// Rows [r0, r1): dx, and dbias's partial sums into the task's f64 totals (2h columns).
template <class S>
HWY_NOINLINE void BackwardRows(const Backward& a, const float* bias, bool stream, int64_t r0, int64_t r1,
                               double* totals) {
  const DF d;
  const size_t h = size_t(a.h), w = 2 * h;
  // this row's f32 dx [da | dc], then the f32 column sums of the current block of rows
  float* out = opf::cpu::thread_scratch<BackwardRowsScratch>(2 * w);
  float* part = out + w;
  std::memset(part, 0, w * sizeof(float));
  const auto one = hn::Set(d, 1.0f);
  for (int64_t r = r0; r < r1; ++r) {
    const S* x = static_cast<const S*>(a.x) + r * 2 * a.h;
    const S* dy = static_cast<const S*>(a.dy) + r * a.h;
    S* dx = static_cast<S*>(a.dx) + r * 2 * a.h;
    const bool more = r + 1 < r1;
    ForColumns(d, h, [&](size_t j, size_t n) {
      if (more) {
        PrefetchSpan(x + w + j, n);
        PrefetchSpan(x + w + h + j, n);
        PrefetchSpan(dy + h + j, n);
      }
      const auto va = hn::Add(LoadPart(d, x + j, n), LoadPartF(d, bias + j, n));
      const auto vc = hn::Add(LoadPart(d, x + h + j, n), LoadPartF(d, bias + h + j, n));
      const auto g = LoadPart(d, dy + j, n);
      const Sig s = Sigmoid(d, va);
      const auto silu = hn::Mul(va, s.s);
      const auto dsilu = hn::Mul(s.s, hn::Add(one, hn::Mul(va, s.t)));  // s (1 + a (1 - s))
      const auto da = hn::Mul(hn::Mul(g, dsilu), vc), dc = hn::Mul(g, silu);
      StorePartF(d, da, out + j, n);
      StorePartF(d, dc, out + h + j, n);
      StorePartF(d, hn::Add(LoadPartF(d, part + j, n), da), part + j, n);
      StorePartF(d, hn::Add(LoadPartF(d, part + h + j, n), dc), part + h + j, n);
    });
    WriteRow(
        d, dx, w, stream, [&](size_t k) { return hn::LoadU(d, out + k); }, [&](size_t k) { return out[k]; });
    if ((r + 1 - r0) % OPF_TUNE_REDUCE_ROWS == 0 || r + 1 == r1) {
      for (size_t k = 0; k < w; ++k) totals[k] += double(part[k]);
      std::memset(part, 0, w * sizeof(float));
    }
  }
  if (stream) hwy::FlushStream();
}

template <class S>
void BackwardT(const Backward& a) {
  const size_t h = size_t(a.h), w = 2 * h;
  auto bias = hwy::AllocateAligned<float>(w);
  Widen(static_cast<const S*>(a.bias), bias.get(), w);
  const bool stream = double(a.rows) * double(w) * sizeof(S) >= double(OPF_TUNE_STREAM_MIN_BYTES);
  std::vector<double> sums;
  opf::cpu::parallel_column_sums(a.host, a.rows, OPF_TUNE_REDUCE_ROWS, w, sums, [&](int64_t r0, int64_t r1, double* t) {
    BackwardRows<S>(a, bias.get(), stream, r0, r1, t);
  });
  S* db = static_cast<S*>(a.dbias);
  for (size_t k = 0; k < w; ++k) db[k] = from_f32<S>(float(sums[k]));
}

OPF_CPU_TARGET_ENTRIES()

}  // namespace opf::bias_swiglu_cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::bias_swiglu_cpu {
OPF_CPU_EXPORT_ENTRIES()
}  // namespace opf::bias_swiglu_cpu
#endif  // HWY_ONCE

#if HWY_ONCE && OPF_HOST_PART  // the host code: not in a JIT kernels module (cpu/dispatch.h)
OPF_HOST_CODE_BEGIN
namespace opf::bias_swiglu_cpu {
using namespace opf::cpu;

// x: [N, 2H] with an even last dim; returns H.
int64_t expect_x(const Args& args, const opf_tensor& x, int i) {
  if (x.shape[1] % 2 != 0)
    failf("%s: argument %d (x) has %lld columns; it must be [N, 2H] (an even count)", args.entry(), i,
          (long long)x.shape[1]);
  if (x.data == nullptr && x.shape[0] * x.shape[1] > 0) failf("%s: argument %d (x) has no data", args.entry(), i);
  return x.shape[1] / 2;
}

void call(const opf_call* c, bool execute) {
  const std::string_view entry = c->entry ? c->entry : "";
  if (entry == "forward") {
    const Args args(c, 3, 0);
    const opf_tensor& x = expect_lead(args, 0, "x", 2, "[N, 2H]");
    const int64_t n = x.shape[0], h = expect_x(args, x, 0);
    Forward a{c->host,
              x.dtype,
              n,
              h,
              x.data,
              expect_arg(args, 1, "bias", x.dtype, {2 * h}).data,
              expect_arg(args, 2, "y", x.dtype, {n, h}).data};
    if (execute && n > 0 && h > 0) OPF_DISPATCH(RunForward)(a);
  } else if (entry == "backward") {
    const Args args(c, 5, 0);
    const opf_tensor& dy = expect_lead(args, 0, "dy", 2, "[N, H]");
    const int64_t n = dy.shape[0], h = dy.shape[1];
    const int32_t t = dy.dtype;
    if (dy.data == nullptr && n * h > 0) failf("backward: argument 0 (dy) has no data");
    Backward a{c->host,
               t,
               n,
               h,
               dy.data,
               expect_arg(args, 1, "x", t, {n, 2 * h}).data,
               expect_arg(args, 2, "bias", t, {2 * h}).data,
               expect_arg(args, 3, "dx", t, {n, 2 * h}).data,
               expect_arg(args, 4, "dbias", t, {2 * h}).data};
    if (execute && h > 0) {
      if (n > 0) {
        OPF_DISPATCH(RunBackward)(a);
      } else {  // no rows: dbias is an empty sum
        std::memset(a.dbias, 0, size_t(2 * h) * dtype_size(DType(t)));
      }
    }
  } else {
    failf("unknown entry '%.40s' (bias_swiglu has forward, backward)", c->entry ? c->entry : "");
  }
}

}  // namespace opf::bias_swiglu_cpu

OPF_DEFINE_MODULE("bias_swiglu", "cpu", opf::bias_swiglu_cpu::isa(), opf::bias_swiglu_cpu::call)
OPF_HOST_CODE_END
#endif  // HWY_ONCE
