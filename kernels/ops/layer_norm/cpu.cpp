// layer_norm — CPU module (contract: ref.cpp). Highway SIMD: prebuilt modules dispatch on the
// running CPU; the JIT builds only the host target (-march=native -DHWY_COMPILE_ONLY_STATIC).
// Rows are split into tasks on the caller's thread pool (cpu/parallel.h): task boundaries depend
// only on the shape, so any thread count gives the same bits. Each row is read from memory once
// and revisited in L1/L2:
//   forward: mean, then the corrected two-pass variance (sum of squared deviations minus the
//            squared sum of deviations / n — robust to large means, unlike E[x^2] - E[x]^2),
//            then y. f16/bf16 rows are re-widened on every pass: cheaper than f32 copies, which
//            would double the row's cache footprint.
//   backward: one pass for the row sums and dgamma/dbeta partials, one for dx. Column sums are
//            f32 partials over OPF_TUNE_REDUCE_ROWS rows flushed into a per-task f64 total; the
//            task totals are added in task order: deterministic, and the long reduction over
//            rows does not lose f32 precision.
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

#ifndef OPF_LAYER_NORM_CPU_COMMON
#define OPF_LAYER_NORM_CPU_COMMON
#include <algorithm>
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

namespace opf::layer_norm_cpu {
struct Forward {
  const opf_host* host;
  int32_t dtype;
  int64_t rows, cols;
  const void *x, *gamma, *beta;
  void* y;
  float *mean, *rstd;
  float eps;
};
struct Backward {
  const opf_host* host;
  int32_t dtype;
  int64_t rows, cols;
  const void *dy, *x, *gamma;
  const float *mean, *rstd;
  void *dx, *dgamma, *dbeta;
};
}  // namespace opf::layer_norm_cpu
#endif  // OPF_LAYER_NORM_CPU_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/layer_norm/cpu.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/aligned_allocator.h"
#include "cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::layer_norm_cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;
using opf::cpu::from_f32;
using opf::cpu::to_f32;

// Sum of n elements, widened to f32.
template <class D, class S>
float RowSum(D d, const S* HWY_RESTRICT src, size_t n) {
  const size_t N = hn::Lanes(d);
  auto a0 = hn::Zero(d), a1 = hn::Zero(d);
  size_t j = 0;
  for (; j + 2 * N <= n; j += 2 * N) {
    a0 = hn::Add(a0, LoadWiden(d, src + j));
    a1 = hn::Add(a1, LoadWiden(d, src + j + N));
  }
  for (; j + N <= n; j += N) a0 = hn::Add(a0, LoadWiden(d, src + j));
  float s = SumLanes(d, hn::Add(a0, a1));
  OPF_SCALAR_LOOP
  for (; j < n; ++j) s += to_f32(src[j]);
  return s;
}

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
// store may alias them), ~1.7x the instructions of the single-threaded loop.
template <class S>
HWY_NOINLINE void ForwardRows(const Forward& a, const float* HWY_RESTRICT g, const float* HWY_RESTRICT b, bool stream,
                              int64_t r0, int64_t r1) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d), n = size_t(a.cols);
  const float inv_n = 1.0f / float(n);

  for (int64_t i = r0; i < r1; ++i) {
    const S* x = static_cast<const S*>(a.x) + i * a.cols;
    S* y = static_cast<S*>(a.y) + i * a.cols;
    const float mean0 = RowSum(d, x, n) * inv_n;

    const auto vm0 = hn::Set(d, mean0);
    auto s0 = hn::Zero(d), s1 = hn::Zero(d), q0 = hn::Zero(d), q1 = hn::Zero(d);
    // this pass and the next run from cache: fetch the next row meanwhile
    const S* x_next = i + 1 < r1 ? x + a.cols : x;
    S* y_next = i + 1 < r1 ? y + a.cols : y;
    size_t j = 0;
    for (; j + 2 * N <= n; j += 2 * N) {
      PrefetchSpan(x_next + j, 2 * N);
      if (!stream) PrefetchSpanForWrite(y_next + j, 2 * N);
      const auto d0 = hn::Sub(LoadWiden(d, x + j), vm0), d1 = hn::Sub(LoadWiden(d, x + j + N), vm0);
      s0 = hn::Add(s0, d0);
      s1 = hn::Add(s1, d1);
      q0 = hn::MulAdd(d0, d0, q0);
      q1 = hn::MulAdd(d1, d1, q1);
    }
    for (; j + N <= n; j += N) {
      const auto d0 = hn::Sub(LoadWiden(d, x + j), vm0);
      s0 = hn::Add(s0, d0);
      q0 = hn::MulAdd(d0, d0, q0);
    }
    float sd = SumLanes(d, hn::Add(s0, s1)), sq = SumLanes(d, hn::Add(q0, q1));
    OPF_SCALAR_LOOP
    for (; j < n; ++j) {
      const float dv = to_f32(x[j]) - mean0;
      sd += dv;
      sq += dv * dv;
    }
    // sd/n is the rounding error of the first mean: corrects both the mean and the variance
    // clamp rounding below 0, but keep a NaN (std::max(0, NaN) would return 0: a finite rstd)
    const float var_raw = (sq - sd * sd * inv_n) * inv_n, var = var_raw < 0.0f ? 0.0f : var_raw;
    const float r = 1.0f / std::sqrt(var + a.eps);
    const float mean = mean0 + sd * inv_n;

    const auto vm = hn::Set(d, mean), vr = hn::Set(d, r);
    WriteRow(
        d, y, n, stream,
        [&](size_t k) {
          const auto xh = hn::Mul(hn::Sub(LoadWiden(d, x + k), vm), vr);
          return hn::MulAdd(xh, hn::LoadU(d, g + k), hn::LoadU(d, b + k));
        },
        [&](size_t k) { return std::fma((to_f32(x[k]) - mean) * r, g[k], b[k]); });
    a.mean[i] = mean;
    a.rstd[i] = r;
  }
  if (stream) hwy::FlushStream();  // every thread orders its own streaming stores
}

template <class S>
void ForwardT(const Forward& a) {
  const size_t n = size_t(a.cols);
  constexpr bool wide = std::is_same_v<S, float>;
  auto scratch = hwy::AllocateAligned<float>(wide ? 1 : 2 * n);
  const float *g = static_cast<const float*>(a.gamma), *b = static_cast<const float*>(a.beta);
  if constexpr (!wide) {
    Widen(static_cast<const S*>(a.gamma), scratch.get(), n);
    Widen(static_cast<const S*>(a.beta), scratch.get() + n, n);
    g = scratch.get();
    b = scratch.get() + n;
  }
  const bool stream = double(a.rows) * double(n) * sizeof(S) >= double(OPF_TUNE_STREAM_MIN_BYTES);
  const int64_t chunk = opf::cpu::rows_per_task(a.rows, 2.0 * double(n) * sizeof(S));
  opf::cpu::parallel_rows(a.host, a.rows, chunk,
                          [&](int64_t r0, int64_t r1) { ForwardRows<S>(a, g, b, stream, r0, r1); });
}

// The rows [r0, r1) of one task. A function of its own, not the lambda's body: captured
// vectors and floats would be reloaded from the closure after every float store (a float
// store may alias them), ~1.7x the instructions of the single-threaded loop.
struct BackwardRowsScratch;  // a task's column partials (cpu/scratch.h)

template <class S>
HWY_NOINLINE void BackwardRows(const Backward& a, const float* HWY_RESTRICT g, bool stream, int64_t r0, int64_t r1,
                               double* HWY_RESTRICT tdg) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d), n = size_t(a.cols);
  const float inv_n = 1.0f / float(n);

  // f32 column partials (dgamma, dbeta); the second pass re-widens x, dy from cache
  // (cheaper than keeping f32 copies, which would double the row's cache footprint)
  float* const pdg = opf::cpu::thread_scratch<BackwardRowsScratch>(2 * n);
  float* const pdb = pdg + n;
  double* tdb = tdg + n;
  std::memset(pdg, 0, 2 * n * sizeof(float));
  for (int64_t i = r0; i < r1; ++i) {
    const S* x = static_cast<const S*>(a.x) + i * a.cols;
    const S* dy = static_cast<const S*>(a.dy) + i * a.cols;
    S* dx = static_cast<S*>(a.dx) + i * a.cols;
    const float mean = a.mean[i], r = a.rstd[i];
    const auto vm = hn::Set(d, mean), vr = hn::Set(d, r);

    auto sg = hn::Zero(d), sgx = hn::Zero(d);
    size_t j = 0;
    for (; j + N <= n; j += N) {
      const auto xv = LoadWiden(d, x + j), dyv = LoadWiden(d, dy + j);
      const auto xh = hn::Mul(hn::Sub(xv, vm), vr);
      const auto gd = hn::Mul(hn::LoadU(d, g + j), dyv);
      sg = hn::Add(sg, gd);
      sgx = hn::MulAdd(gd, xh, sgx);
      hn::StoreU(hn::MulAdd(dyv, xh, hn::LoadU(d, pdg + j)), d, pdg + j);
      hn::StoreU(hn::Add(dyv, hn::LoadU(d, pdb + j)), d, pdb + j);
    }
    float sum_g = SumLanes(d, sg), sum_gx = SumLanes(d, sgx);
    OPF_SCALAR_LOOP
    for (; j < n; ++j) {
      const float xv = to_f32(x[j]), dyv = to_f32(dy[j]);
      const float xh = (xv - mean) * r, gd = g[j] * dyv;
      sum_g += gd;
      sum_gx += gd * xh;
      pdg[j] += dyv * xh;
      pdb[j] += dyv;
    }

    // dx = r/n * (n*g*dy - sum_g - xhat*sum_gx)
    const float c1 = sum_g * inv_n, c2 = sum_gx * inv_n;
    const auto vc1 = hn::Set(d, c1), vc2 = hn::Set(d, c2);
    const auto dx_at = [&](size_t k) {
      const auto xh = hn::Mul(hn::Sub(LoadWiden(d, x + k), vm), vr);
      const auto gd = hn::Mul(hn::LoadU(d, g + k), LoadWiden(d, dy + k));
      return hn::Mul(vr, hn::Sub(gd, hn::MulAdd(xh, vc2, vc1)));
    };
    const auto dx_one = [&](size_t k) {
      return r * (g[k] * to_f32(dy[k]) - std::fma((to_f32(x[k]) - mean) * r, c2, c1));
    };
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
      for (size_t k = 0; k < n; ++k) {
        tdg[k] += double(pdg[k]);
        tdb[k] += double(pdb[k]);
      }
      std::memset(pdg, 0, 2 * n * sizeof(float));
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
  std::vector<double> sums;  // dgamma then dbeta, f64
  opf::cpu::parallel_column_sums(
      a.host, a.rows, OPF_TUNE_REDUCE_ROWS, 2 * n, sums,
      [&](int64_t r0, int64_t r1, double* tdg) { BackwardRows<S>(a, g, stream, r0, r1, tdg); });
  S *dg = static_cast<S*>(a.dgamma), *db = static_cast<S*>(a.dbeta);
  for (size_t k = 0; k < n; ++k) {
    dg[k] = from_f32<S>(float(sums[k]));
    db[k] = from_f32<S>(float(sums[n + k]));
  }
}

OPF_CPU_TARGET_ENTRIES()

}  // namespace opf::layer_norm_cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::layer_norm_cpu {
OPF_CPU_EXPORT_ENTRIES()
}  // namespace opf::layer_norm_cpu
#endif  // HWY_ONCE

#if HWY_ONCE && OPF_HOST_PART  // the host code: not in a JIT kernels module (cpu/dispatch.h)
OPF_HOST_CODE_BEGIN
namespace opf::layer_norm_cpu {
using namespace opf::cpu;

void call(const opf_call* c, bool execute) {
  const std::string_view entry = c->entry ? c->entry : "";
  if (entry == "forward") {
    const Args args(c, 6, 1);
    const opf_tensor& x = expect_lead(args, 0, "x", 2, "[rows, cols]");
    const int64_t rows = x.shape[0], cols = x.shape[1];
    const int32_t t = x.dtype;
    Forward a{c->host,
              t,
              rows,
              cols,
              x.data,
              expect_arg(args, 1, "gamma", t, {cols}).data,
              expect_arg(args, 2, "beta", t, {cols}).data,
              expect_arg(args, 3, "y", t, {rows, cols}).data,
              static_cast<float*>(expect_arg(args, 4, "mean", OPF_F32, {rows}).data),
              static_cast<float*>(expect_arg(args, 5, "rstd", OPF_F32, {rows}).data),
              float(args.f64(0, "eps"))};
    if (execute && rows > 0 && cols > 0) OPF_DISPATCH(RunForward)(a);
  } else if (entry == "backward") {
    const Args args(c, 8, 1);
    const opf_tensor& dy = expect_lead(args, 0, "dy", 2, "[rows, cols]");
    const int64_t rows = dy.shape[0], cols = dy.shape[1];
    const int32_t t = dy.dtype;
    Backward a{c->host,
               t,
               rows,
               cols,
               dy.data,
               expect_arg(args, 1, "x", t, {rows, cols}).data,
               expect_arg(args, 4, "gamma", t, {cols}).data,
               static_cast<const float*>(expect_arg(args, 2, "mean", OPF_F32, {rows}).data),
               static_cast<const float*>(expect_arg(args, 3, "rstd", OPF_F32, {rows}).data),
               expect_arg(args, 5, "dx", t, {rows, cols}).data,
               expect_arg(args, 6, "dgamma", t, {cols}).data,
               expect_arg(args, 7, "dbeta", t, {cols}).data};
    if (execute && cols > 0) OPF_DISPATCH(RunBackward)(a);
  } else {
    failf("unknown entry '%.40s' (layer_norm has forward, backward)", c->entry ? c->entry : "");
  }
}

}  // namespace opf::layer_norm_cpu

OPF_DEFINE_MODULE("layer_norm", "cpu", opf::layer_norm_cpu::isa(), opf::layer_norm_cpu::call)
OPF_HOST_CODE_END
#endif  // HWY_ONCE
