// rms_norm — CPU module (contract: ref.cpp). Highway SIMD: prebuilt modules dispatch on the
// running CPU; the JIT builds only the host target (-march=native -DHWY_COMPILE_ONLY_STATIC).
// Rows are split into tasks on the caller's thread pool (cpu/parallel.h): task boundaries depend
// only on the shape, so any thread count gives the same bits. Each row is read from memory once
// and revisited in L1/L2:
//   forward: sum of squares, then y. f16/bf16 rows are re-widened on every pass: cheaper than
//            f32 copies, which would double the row's cache footprint.
//   backward: one pass for the row sum and the dgamma partials, one for dx. dgamma: f32 partials
//            over OPF_TUNE_REDUCE_ROWS rows flushed into per-task f64 totals, added in task order.
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
#ifndef OPF_TUNE_PREFETCH_ROWS_BYTES
// backward's pass 2 prefetches the next row's x and dy only while both rows' x and dy fit this
// (half the L1d): beyond it the prefetched lines evict the row being worked on. Measured: f32 at
// 4096 columns took 0.87-0.95x the time without the prefetch; layer_norm's 16-bit rows at 4096
// columns, which fit, 1.04-1.2x the time without it.
#define OPF_TUNE_PREFETCH_ROWS_BYTES (16 << 10)
#endif
#ifndef OPF_TUNE_REDUCE_ROWS
#define OPF_TUNE_REDUCE_ROWS 32
#endif

#ifndef OPF_RMS_NORM_CPU_COMMON
#define OPF_RMS_NORM_CPU_COMMON
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>
#include <vector>

#include "cpu/args.h"
#include "cpu/dispatch.h"
#include "cpu/parallel.h"
#include "cpu/scratch.h"
#include "cpu/storage.h"
#include "opforge/module.h"

namespace opf::rms_norm_cpu {
struct Forward {
  const opf_host* host;
  int32_t dtype;
  int64_t rows, cols;
  const void *x, *gamma;
  void* y;
  float* rstd;
  float eps;
};
struct Backward {
  const opf_host* host;
  int32_t dtype;
  int64_t rows, cols;
  const void *dy, *x, *gamma;
  const float* rstd;
  void *dx, *dgamma;
};
}  // namespace opf::rms_norm_cpu
#endif  // OPF_RMS_NORM_CPU_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/rms_norm/cpu.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/aligned_allocator.h"
#include "cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::rms_norm_cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;
using opf::cpu::from_f32;
using opf::cpu::to_f32;

template <class S>
void Widen(const S* HWY_RESTRICT src, float* HWY_RESTRICT dst, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t j = 0;
  for (; j + N <= n; j += N) hn::StoreU(LoadWiden(d, src + j), d, dst + j);
  OPF_SCALAR_LOOP
  for (; j < n; ++j) dst[j] = to_f32(src[j]);
}

// The rows [r0, r1) of one task. A function of its own, not the lambda's body: captured
// vectors and floats would be reloaded from the closure after every float store (a float
// store may alias them).
template <class S>
HWY_NOINLINE void ForwardRows(const Forward& a, const float* HWY_RESTRICT g, bool stream, int64_t r0, int64_t r1) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d), n = size_t(a.cols);
  const float inv_n = 1.0f / float(n);

  for (int64_t i = r0; i < r1; ++i) {
    const S* x = static_cast<const S*>(a.x) + i * a.cols;
    S* y = static_cast<S*>(a.y) + i * a.cols;
    auto q0 = hn::Zero(d), q1 = hn::Zero(d);
    size_t j = 0;
    for (; j + 2 * N <= n; j += 2 * N) {
      const auto v0 = LoadWiden(d, x + j), v1 = LoadWiden(d, x + j + N);
      q0 = hn::MulAdd(v0, v0, q0);
      q1 = hn::MulAdd(v1, v1, q1);
    }
    for (; j + N <= n; j += N) {
      const auto v = LoadWiden(d, x + j);
      q0 = hn::MulAdd(v, v, q0);
    }
    float sq = SumLanes(d, hn::Add(q0, q1));
    OPF_SCALAR_LOOP
    for (; j < n; ++j) {
      const float v = to_f32(x[j]);
      sq += v * v;
    }
    const float r = 1.0f / std::sqrt(sq * inv_n + a.eps);

    const auto vr = hn::Set(d, r);
    const int64_t next = i + 1 < r1 ? a.cols : 0;  // this pass runs from cache: fetch the next row
    WriteRow(
        d, y, n, stream,
        [&](size_t k) {
          PrefetchSpan(x + next + k, N);
          if (!stream) PrefetchSpanForWrite(y + next + k, N);
          return hn::Mul(hn::Mul(LoadWiden(d, x + k), vr), hn::LoadU(d, g + k));
        },
        [&](size_t k) { return to_f32(x[k]) * r * g[k]; });
    a.rstd[i] = r;
  }
  if (stream) hwy::FlushStream();  // every thread orders its own streaming stores
}

template <class S>
void ForwardT(const Forward& a) {
  const size_t n = size_t(a.cols);
  constexpr bool wide = std::is_same_v<S, float>;
  auto scratch = hwy::AllocateAligned<float>(wide ? 1 : n);
  const float* g = static_cast<const float*>(a.gamma);
  if constexpr (!wide) {
    Widen(static_cast<const S*>(a.gamma), scratch.get(), n);
    g = scratch.get();
  }
  const bool stream = double(a.rows) * double(n) * sizeof(S) >= double(OPF_TUNE_STREAM_MIN_BYTES);
  const int64_t chunk = opf::cpu::rows_per_task(a.rows, 2.0 * double(n) * sizeof(S));
  opf::cpu::parallel_rows(a.host, a.rows, chunk, [&](int64_t r0, int64_t r1) { ForwardRows<S>(a, g, stream, r0, r1); });
}

// The rows [r0, r1) of one task. A function of its own, not the lambda's body: captured
// vectors and floats would be reloaded from the closure after every float store (a float
// store may alias them).
struct BackwardRowsScratch;  // a task's column partials (cpu/scratch.h)

template <class S>
HWY_NOINLINE void BackwardRows(const Backward& a, const float* HWY_RESTRICT g, bool stream, int64_t r0, int64_t r1,
                               double* HWY_RESTRICT tdg) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d), n = size_t(a.cols);
  const float inv_n = 1.0f / float(n);

  // f32 dgamma partials; the second pass re-widens x, dy from cache (cheaper than keeping f32
  // copies, which would double the row's cache footprint)
  float* const pdg = opf::cpu::thread_scratch<BackwardRowsScratch>(n);
  std::memset(pdg, 0, n * sizeof(float));
  for (int64_t i = r0; i < r1; ++i) {
    const S* x = static_cast<const S*>(a.x) + i * a.cols;
    const S* dy = static_cast<const S*>(a.dy) + i * a.cols;
    S* dx = static_cast<S*>(a.dx) + i * a.cols;
    const float r = a.rstd[i];
    const auto vr = hn::Set(d, r);

    auto sgx = hn::Zero(d);
    size_t j = 0;
    for (; j + N <= n; j += N) {
      const auto xv = LoadWiden(d, x + j), dyv = LoadWiden(d, dy + j);
      const auto xh = hn::Mul(xv, vr);
      sgx = hn::MulAdd(hn::Mul(hn::LoadU(d, g + j), dyv), xh, sgx);
      hn::StoreU(hn::MulAdd(dyv, xh, hn::LoadU(d, pdg + j)), d, pdg + j);
    }
    float sum_gx = SumLanes(d, sgx);
    OPF_SCALAR_LOOP
    for (; j < n; ++j) {
      const float xv = to_f32(x[j]), dyv = to_f32(dy[j]);
      const float xh = xv * r;
      sum_gx += g[j] * dyv * xh;
      pdg[j] += dyv * xh;
    }

    // dx = r/n * (n*g*dy - xhat*sum_gx)
    const float c2 = sum_gx * inv_n;
    const auto vc2 = hn::Set(d, c2);
    const auto dx_at = [&](size_t k) {
      const auto xh = hn::Mul(LoadWiden(d, x + k), vr);
      const auto gd = hn::Mul(hn::LoadU(d, g + k), LoadWiden(d, dy + k));
      return hn::Mul(vr, hn::NegMulAdd(xh, vc2, gd));
    };
    const auto dx_one = [&](size_t k) { return r * std::fma(-(to_f32(x[k]) * r), c2, g[k] * to_f32(dy[k])); };
    // this pass runs from cache: fetch the next row, where both rows fit in L1
    if (i + 1 < r1 && 2 * n * sizeof(S) <= size_t(OPF_TUNE_PREFETCH_ROWS_BYTES)) {
      WriteRow(
          d, dx, n, stream,
          [&](size_t k) {
            PrefetchSpan(x + a.cols + k, N);
            PrefetchSpan(dy + a.cols + k, N);
            if (!stream) PrefetchSpanForWrite(dx + a.cols + k, N);
            return dx_at(k);
          },
          dx_one);
    } else {
      WriteRow(d, dx, n, stream, dx_at, dx_one);
    }

    if ((i + 1 - r0) % OPF_TUNE_REDUCE_ROWS == 0 || i + 1 == r1) {
      for (size_t k = 0; k < n; ++k) tdg[k] += double(pdg[k]);
      std::memset(pdg, 0, n * sizeof(float));
    }
  }
  if (stream) hwy::FlushStream();
}

template <class S>
void BackwardT(const Backward& a) {
  const size_t n = size_t(a.cols);
  auto gamma = hwy::AllocateAligned<float>(n);
  float* g = gamma.get();
  Widen(static_cast<const S*>(a.gamma), g, n);
  const bool stream = double(a.rows) * double(n) * sizeof(S) >= double(OPF_TUNE_STREAM_MIN_BYTES);
  std::vector<double> sums;  // dgamma, f64
  opf::cpu::parallel_column_sums(
      a.host, a.rows, OPF_TUNE_REDUCE_ROWS, n, sums,
      [&](int64_t r0, int64_t r1, double* tdg) { BackwardRows<S>(a, g, stream, r0, r1, tdg); });
  S* dg = static_cast<S*>(a.dgamma);
  for (size_t k = 0; k < n; ++k) dg[k] = from_f32<S>(float(sums[k]));
}

OPF_CPU_TARGET_ENTRIES()

}  // namespace opf::rms_norm_cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::rms_norm_cpu {
OPF_CPU_EXPORT_ENTRIES()
}  // namespace opf::rms_norm_cpu
#endif  // HWY_ONCE

#if HWY_ONCE && OPF_HOST_PART  // the host code: not in a JIT kernels module (cpu/dispatch.h)
OPF_HOST_CODE_BEGIN
namespace opf::rms_norm_cpu {
using namespace opf::cpu;

void call(const opf_call* c, bool execute) {
  const std::string_view entry = c->entry ? c->entry : "";
  if (entry == "forward") {
    const Args args(c, 4, 1);
    const opf_tensor& x = expect_lead(args, 0, "x", 2, "[rows, cols]");
    const int64_t rows = x.shape[0], cols = x.shape[1];
    const int32_t t = x.dtype;
    Forward a{c->host,
              t,
              rows,
              cols,
              x.data,
              expect_arg(args, 1, "gamma", t, {cols}).data,
              expect_arg(args, 2, "y", t, {rows, cols}).data,
              static_cast<float*>(expect_arg(args, 3, "rstd", OPF_F32, {rows}).data),
              float(args.f64(0, "eps"))};
    if (execute && rows > 0 && cols > 0) OPF_DISPATCH(RunForward)(a);
  } else if (entry == "backward") {
    const Args args(c, 6, 1);
    const opf_tensor& dy = expect_lead(args, 0, "dy", 2, "[rows, cols]");
    const int64_t rows = dy.shape[0], cols = dy.shape[1];
    const int32_t t = dy.dtype;
    Backward a{c->host,
               t,
               rows,
               cols,
               dy.data,
               expect_arg(args, 1, "x", t, {rows, cols}).data,
               expect_arg(args, 3, "gamma", t, {cols}).data,
               static_cast<const float*>(expect_arg(args, 2, "rstd", OPF_F32, {rows}).data),
               expect_arg(args, 4, "dx", t, {rows, cols}).data,
               expect_arg(args, 5, "dgamma", t, {cols}).data};
    if (execute && cols > 0) OPF_DISPATCH(RunBackward)(a);
  } else {
    failf("unknown entry '%.40s' (rms_norm has forward, backward)", c->entry ? c->entry : "");
  }
}

}  // namespace opf::rms_norm_cpu

OPF_DEFINE_MODULE("rms_norm", "cpu", opf::rms_norm_cpu::isa(), opf::rms_norm_cpu::call)
OPF_HOST_CODE_END
#endif  // HWY_ONCE
