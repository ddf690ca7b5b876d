// softmax_xentropy — CPU module (contract, incl. padding rows, label errors and NaN: ref.cpp).
// Highway SIMD: prebuilt modules dispatch on the running CPU; the JIT builds only the host target.
// Rows are split into tasks on the caller's thread pool (cpu/parallel.h); rows are independent,
// so any thread count gives the same bits. Memory traffic is the minimum: forward reads the logits
// once and writes 2 floats per row; backward reads them once and writes the gradient once.
//   forward: per row, pass 1 finds the max m (16-bit storage: also widens the row into an f32 copy
//            in L1/L2), pass 2 sums S = sum exp(x - m) (and T = sum (x - m) for smoothing) from
//            cache. Software-pipelined: pass 2 of row r and pass 1 of row r+1 are one loop, so the
//            next row's loads overlap the exp arithmetic; plus a software prefetch ahead
//            (tune prefetch_bytes). loss = log S + (1-s)(m - x_y) - (s/C) T: non-negative terms.
//   backward: one pass: dx = g exp(x - lse) - g s/C (- g (1-s) at the label), streamed
//            (non-temporal) stores when the gradient exceeds the cache.
//   exp: a fast form in the main loops (on AVX-512 without clamps: anything it cannot do comes out
//            non-finite, which sends the row to an exact, clamped path); see ExpFast/ExpSum.
// Labels are checked (padding_idx or in [0, C)) before anything is written.
// Arithmetic as written: no implicit a*b+c -> fma contraction (GCC's C++ default), so that every
// target and the JIT build round the same expressions; explicit fused ops are hn::MulAdd. First
// line of the TU on purpose: every function, Highway's included, must carry the same optimize
// options to stay inlinable.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif
#ifndef OPF_TUNE_STREAM_MIN_BYTES
#define OPF_TUNE_STREAM_MIN_BYTES (16 << 20)  // outputs this large bypass the cache (~ usable L3)
#endif
#ifndef OPF_TUNE_PREFETCH_BYTES
#define OPF_TUNE_PREFETCH_BYTES 4096  // software prefetch distance ahead of the logits stream
#endif
#ifndef OPF_SOFTMAX_XENTROPY_CPU_COMMON
#define OPF_SOFTMAX_XENTROPY_CPU_COMMON
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

namespace opf::softmax_xentropy_cpu {
struct Forward {
  const opf_host* host;
  int32_t dtype;
  int64_t rows, cols;
  const void* x;
  const int64_t* labels;
  float* loss;
  float* lse;
  float smoothing;
  int64_t padding_idx;
};
struct Backward {
  const opf_host* host;
  int32_t dtype;
  int64_t rows, cols;
  const float* grad;
  const void* x;
  const float* lse;
  const int64_t* labels;
  void* dx;
  // s/C and the label's 1 - s + s/C, each rounded once from float64: with C = 1 the label's target
  // is exactly 1, so g exp(0) - g cancels to exactly 0 (two f32 products g (1-s) + g s left ~u g)
  float spread, target_label;
  int64_t padding_idx;
};
}  // namespace opf::softmax_xentropy_cpu
#endif  // OPF_SOFTMAX_XENTROPY_CPU_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/softmax_xentropy/cpu.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/aligned_allocator.h"
#include "cpu/simd-inl.h"
#include "cpu/exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::softmax_xentropy_cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;
using opf::cpu::from_f32;
using opf::cpu::to_f32;

// Software prefetch OPF_TUNE_PREFETCH_BYTES ahead of p, for the 2 vectors at p. One thread's
// demand loads, spread thin between exp arithmetic, keep too few cache misses in flight for the
// hardware prefetcher alone to reach memory bandwidth (measured: ~6 GB/s without, ~9-10 with, on
// a 2-core Sapphire Rapids VM). Beyond the end of the logits it is harmless (no fault).
template <class D, class S>
HWY_INLINE void PrefetchAhead(D d, const S* p) {
  const char* c = reinterpret_cast<const char*>(p) + OPF_TUNE_PREFETCH_BYTES;
  for (size_t b = 0; b < 2 * hn::Lanes(d) * sizeof(S); b += 64) hwy::Prefetch(c + b);
}

// Pass 1 of a row on its own (the first row of a task): its max, and for 16-bit storage its f32
// copy zn (pass 2 reads that from L1/L2 instead of widening again).
template <class D, class S>
HWY_INLINE float RowMax(D d, const S* HWY_RESTRICT x, size_t n, float* HWY_RESTRICT zn) {
  constexpr bool kCopy = !std::is_same_v<S, float>;
  const size_t N = hn::Lanes(d);
  auto m0 = hn::Set(d, -std::numeric_limits<float>::infinity()), m1 = m0;
  size_t j = 0;
  for (; j + 2 * N <= n; j += 2 * N) {
    PrefetchAhead(d, x + j);
    const auto v0 = LoadWiden(d, x + j), v1 = LoadWiden(d, x + j + N);
    if constexpr (kCopy) {
      hn::Store(v0, d, zn + j);
      hn::Store(v1, d, zn + j + N);
    }
    m0 = hn::Max(m0, v0);
    m1 = hn::Max(m1, v1);
  }
  for (; j + N <= n; j += N) {
    const auto v = LoadWiden(d, x + j);
    if constexpr (kCopy) hn::Store(v, d, zn + j);
    m0 = hn::Max(m0, v);
  }
  float m = MaxLanes(d, hn::Max(m0, m1));
  OPF_SCALAR_LOOP
  for (; j < n; ++j) {
    if constexpr (kCopy) zn[j] = to_f32(x[j]);
    m = std::max(m, to_f32(x[j]));  // (a NaN is caught by the sums of pass 2)
  }
  return m;
}

// Pass 2 of row r fused with pass 1 of row r + 1 (kNext), software-pipelined: one loop computes
// row r's S = sum exp(x - m) and T = sum (x - m) (kT) from cache (z: the row, or its f32 copy),
// and the next row's max (and f32 copy) from memory. The next row's loads then overlap the exp
// arithmetic, and the hardware prefetcher sees one steady stream.
template <bool kT, bool kNext, class D, class Z, class S>
HWY_INLINE void RowSums(D d, const Z* HWY_RESTRICT z, size_t n, float m, const S* HWY_RESTRICT xn,
                        float* HWY_RESTRICT zn, float& sum, float& tsum, float& mnext) {
  constexpr bool kCopy = !std::is_same_v<S, float>;
  const size_t N = hn::Lanes(d);
  const auto vm = hn::Set(d, m);
  auto s0 = hn::Zero(d), s1 = s0, t0 = s0, t1 = s0;
  auto m0 = hn::Set(d, -std::numeric_limits<float>::infinity()), m1 = m0;
  size_t j = 0;
  for (; j + 2 * N <= n; j += 2 * N) {
    if constexpr (kNext) {
      PrefetchAhead(d, xn + j);
      const auto v0 = LoadWiden(d, xn + j), v1 = LoadWiden(d, xn + j + N);
      if constexpr (kCopy) {
        hn::Store(v0, d, zn + j);
        hn::Store(v1, d, zn + j + N);
      }
      m0 = hn::Max(m0, v0);
      m1 = hn::Max(m1, v1);
    }
    const auto ta = hn::Sub(LoadWiden(d, z + j), vm);
    const auto tb = hn::Sub(LoadWiden(d, z + j + N), vm);
    if constexpr (kT) {
      t0 = hn::Add(t0, ta);
      t1 = hn::Add(t1, tb);
    }
    s0 = hn::Add(s0, ExpSum(d, ta));
    s1 = hn::Add(s1, ExpSum(d, tb));
  }
  for (; j + N <= n; j += N) {
    if constexpr (kNext) {
      const auto v = LoadWiden(d, xn + j);
      if constexpr (kCopy) hn::Store(v, d, zn + j);
      m0 = hn::Max(m0, v);
    }
    const auto t = hn::Sub(LoadWiden(d, z + j), vm);
    if constexpr (kT) t0 = hn::Add(t0, t);
    s0 = hn::Add(s0, ExpSum(d, t));
  }
  sum = SumLanes(d, hn::Add(s0, s1));
  tsum = kT ? SumLanes(d, hn::Add(t0, t1)) : 0.0f;
  if constexpr (kNext) mnext = MaxLanes(d, hn::Max(m0, m1));
  OPF_SCALAR_LOOP
  for (; j < n; ++j) {
    if constexpr (kNext) {
      if constexpr (kCopy) zn[j] = to_f32(xn[j]);
      mnext = std::max(mnext, to_f32(xn[j]));
    }
    const float t = to_f32(z[j]) - m;
    tsum += t;  // (the tail always: a NaN here must flag the row)
    sum += std::exp(t);
  }
}

// The same sums where the fast ones came out non-finite: exp clamped to [-87, 88] (t < -87 adds
// exp(-87), nothing next to S >= 1), T always; a NaN anywhere makes T NaN.
template <class D, class Z>
HWY_INLINE void RowSumsExact(D d, const Z* HWY_RESTRICT z, size_t n, float m, float& sum, float& tsum) {
  const size_t N = hn::Lanes(d);
  const auto vm = hn::Set(d, m);
  auto s0 = hn::Zero(d), t0 = s0;
  size_t j = 0;
  for (; j + N <= n; j += N) {
    const auto t = hn::Sub(LoadWiden(d, z + j), vm);
    t0 = hn::Add(t0, t);
    s0 = hn::Add(s0, ExpClamped(d, t));
  }
  sum = SumLanes(d, s0);
  tsum = SumLanes(d, t0);
  OPF_SCALAR_LOOP
  for (; j < n; ++j) {
    const float t = to_f32(z[j]) - m;
    tsum += t;
    sum += std::exp(std::max(t, kExpFloor));
  }
}

struct RowCopies;  // its thread_scratch (one per thread, whatever the dtype)

template <class S>
void ForwardT(const Forward& a) {
  const hn::ScalableTag<float> d;
  const size_t n = size_t(a.cols);
  const float keep = 1.0f - a.smoothing, spread = a.smoothing / float(a.cols);
  const bool smooth = a.smoothing != 0.0f, with_t = smooth || !kFastFlags;
  // 16-bit rows are widened once, in pass 1, into an f32 copy (two: this row's, the next one's)
  constexpr bool kCopy = !std::is_same_v<S, float>;
  using Z = std::conditional_t<kCopy, float, S>;
  // Tasks of ~4 MiB (at least 16 rows where there are): a task's first row has no previous
  // row to overlap its pass 1 with.
  const int64_t chunk =
      std::min<int64_t>(std::max<int64_t>(a.rows, 1), 16 * opf::cpu::rows_per_task(a.rows, double(n) * sizeof(S)));
  opf::cpu::parallel_rows(a.host, a.rows, chunk, [&](int64_t r0, int64_t r1) {
    const size_t stride = (n + 15) / 16 * 16;  // whole cache lines: aligned stores
    float* const copies = kCopy ? opf::cpu::thread_scratch<RowCopies>(2 * stride) : nullptr;
    const auto row = [&](int64_t r) { return static_cast<const S*>(a.x) + r * a.cols; };
    const auto copy = [&](int64_t r) { return kCopy ? copies + size_t(r % 2) * stride : nullptr; };
    const auto source = [&](int64_t r) {  // pass 2 reads the row, or its f32 copy
      if constexpr (kCopy) return static_cast<const Z*>(copy(r));
      else return static_cast<const Z*>(row(r));
    };
    float m = RowMax(d, row(r0), n, copy(r0));
    for (int64_t r = r0; r < r1; ++r) {
      float sum, tsum, mnext = 0.0f;
      const bool next = r + 1 < r1;
      const S* xn = next ? row(r + 1) : nullptr;
      float* zn = next ? copy(r + 1) : nullptr;
      if (next && with_t) RowSums<true, true>(d, source(r), n, m, xn, zn, sum, tsum, mnext);
      else if (next) RowSums<false, true>(d, source(r), n, m, xn, zn, sum, tsum, mnext);
      else if (with_t) RowSums<true, false>(d, source(r), n, m, xn, zn, sum, tsum, mnext);
      else RowSums<false, false>(d, source(r), n, m, xn, zn, sum, tsum, mnext);
      if (std::isfinite(m) && !(std::isfinite(sum) && std::isfinite(tsum))) RowSumsExact(d, source(r), n, m, sum, tsum);

      const S* x = row(r);
      const int64_t label = a.labels[r];
      const bool pad = label == a.padding_idx;
      if (!std::isfinite(m) || std::isnan(tsum)) {  // NaN, or a max of +-inf (inf - inf)
        a.lse[r] = std::numeric_limits<float>::quiet_NaN();
        a.loss[r] = pad ? 0.0f : std::numeric_limits<float>::quiet_NaN();
      } else {
        const float log_sum = std::log(sum);
        a.lse[r] = m + log_sum;
        float loss = log_sum + keep * (m - (pad ? 0.0f : to_f32(x[label])));
        if (smooth) loss = loss - spread * tsum;  // s = 0: plain cross entropy, no 0 * -inf
        a.loss[r] = pad ? 0.0f : loss;
      }
      m = mnext;
    }
  });
}

template <class S>
void BackwardT(const Backward& a) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const size_t N = hn::Lanes(d), n = size_t(a.cols);
  const auto vfloor = hn::Set(d, kExpFloor), zero = hn::Zero(d);
  const auto iota = hn::Iota(di, 0);
  const bool stream = double(a.rows) * double(n) * sizeof(S) >= double(OPF_TUNE_STREAM_MIN_BYTES);
  const int64_t chunk = opf::cpu::rows_per_task(a.rows, 2.0 * double(n) * sizeof(S));
  opf::cpu::parallel_rows(a.host, a.rows, chunk, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const S* x = static_cast<const S*>(a.x) + r * a.cols;
      S* dx = static_cast<S*>(a.dx) + r * a.cols;
      const int64_t label = a.labels[r];
      if (label == a.padding_idx) {  // exact zeros, whatever the logits and g hold
        WriteRow(
            d, dx, n, stream, [&](size_t) { return zero; }, [](size_t) { return 0.0f; });
        continue;
      }
      // dx = g e - g s/C, and g e - g (1 - s + s/C) at the label: one MulAdd per element
      const float g = a.grad[r], lse = a.lse[r];
      const float off = -(g * a.spread), off_label = -(g * a.target_label);
      const auto vg = hn::Set(d, g), vlse = hn::Set(d, lse), voff = hn::Set(d, off), voff_label = hn::Set(d, off_label);
      const auto finish = [&](size_t k, hn::Vec<decltype(d)> e) {
        const int64_t at = label - int64_t(k);
        if (at >= 0 && at < int64_t(N)) {
          const auto is_label = hn::RebindMask(d, hn::Eq(iota, hn::Set(di, int32_t(at))));
          return hn::MulAdd(vg, e, hn::IfThenElse(is_label, voff_label, voff));
        }
        return hn::MulAdd(vg, e, voff);
      };
      const auto one = [&](size_t k) {
        const float e = std::exp(to_f32(x[k]) - lse);
        return g * e + (int64_t(k) == label ? off_label : off);
      };
      // exact: exp clamped to [-87, 88] and 0 below -87; t * 0 carries a NaN logit or lse into
      // its element, which the clamp would drop
      const auto exact = [&](size_t k) {
        PrefetchAhead(hn::Half<decltype(d)>(), x + k);
        const auto t = hn::Sub(LoadWiden(d, x + k), vlse);
        const auto e = hn::MulAdd(t, zero, ExpClamped(d, t));
        return finish(k, hn::IfThenZeroElse(hn::Lt(t, vfloor), e));
      };
      if constexpr (kFastFlags) {
        // fast (t = x - lse <= 0 with the forward's lse); a non-finite exp anywhere (NaN or
        // infinite logit or lse) and the row is written again the exact way
        auto flags = zero;
        WriteRow(
            d, dx, n, stream,
            [&](size_t k) {
              PrefetchAhead(hn::Half<decltype(d)>(), x + k);  // (one vector's worth)
              const auto e = ExpFast(d, hn::Sub(LoadWiden(d, x + k), vlse));
              flags = hn::Add(flags, e);
              return finish(k, e);
            },
            one);
        if (std::isfinite(SumLanes(d, flags))) continue;
      }
      WriteRow(d, dx, n, stream, exact, one);
    }
    if (stream) hwy::FlushStream();  // every thread orders its own streaming stores
  });
}

OPF_CPU_TARGET_ENTRIES()

}  // namespace opf::softmax_xentropy_cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::softmax_xentropy_cpu {
OPF_CPU_EXPORT_ENTRIES()
}  // namespace opf::softmax_xentropy_cpu
#endif  // HWY_ONCE

#if HWY_ONCE && OPF_HOST_PART  // the host code: not in a JIT kernels module (cpu/dispatch.h)
OPF_HOST_CODE_BEGIN
namespace opf::softmax_xentropy_cpu {
using namespace opf::cpu;

// Every label is padding_idx or a class index; the first that is neither fails the call.
void check_labels(const char* entry, const int64_t* labels, int64_t rows, int64_t cols, int64_t padding_idx) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t y = labels[r];
    if (y != padding_idx && (y < 0 || y >= cols))
      failf("%s: labels[%lld] = %lld is outside [0, %lld) and is not padding_idx %lld", entry, (long long)r,
            (long long)y, (long long)cols, (long long)padding_idx);
  }
}

void call(const opf_call* c, bool execute) {
  const std::string_view entry = c->entry ? c->entry : "";
  if (entry == "forward") {
    const Args args(c, 4, 2);
    const double smoothing = args.f64(0, "smoothing");
    const int64_t padding_idx = args.i64(1, "padding_idx");
    if (!(smoothing >= 0.0 && smoothing < 1.0)) failf("forward: smoothing = %g is outside [0, 1)", smoothing);
    const opf_tensor& x = expect_lead(args, 0, "logits", 2, "[N, C]");
    const int64_t rows = x.shape[0], cols = x.shape[1];
    if (cols < 1) failf("forward: argument 0 (logits) has C = %lld classes, needs at least 1", (long long)cols);
    Forward a{c->host,
              x.dtype,
              rows,
              cols,
              x.data,
              static_cast<const int64_t*>(expect_arg(args, 1, "labels", OPF_I64, {rows}).data),
              static_cast<float*>(expect_arg(args, 2, "losses", OPF_F32, {rows}).data),
              static_cast<float*>(expect_arg(args, 3, "max_log_sum_exp", OPF_F32, {rows}).data),
              float(smoothing),
              padding_idx};
    check_labels("forward", a.labels, rows, cols, padding_idx);  // host data: supports() checks it too
    if (!execute || rows == 0) return;
    OPF_DISPATCH(RunForward)(a);
  } else if (entry == "backward") {
    const Args args(c, 5, 2);
    const double smoothing = args.f64(0, "smoothing");
    const int64_t padding_idx = args.i64(1, "padding_idx");
    if (!(smoothing >= 0.0 && smoothing < 1.0)) failf("backward: smoothing = %g is outside [0, 1)", smoothing);
    const opf_tensor& x = expect_lead(args, 1, "logits", 2, "[N, C]");
    const int64_t rows = x.shape[0], cols = x.shape[1];
    if (cols < 1) failf("backward: argument 1 (logits) has C = %lld classes, needs at least 1", (long long)cols);
    Backward a{c->host,
               x.dtype,
               rows,
               cols,
               static_cast<const float*>(expect_arg(args, 0, "grad_losses", OPF_F32, {rows}).data),
               x.data,
               static_cast<const float*>(expect_arg(args, 2, "max_log_sum_exp", OPF_F32, {rows}).data),
               static_cast<const int64_t*>(expect_arg(args, 3, "labels", OPF_I64, {rows}).data),
               expect_arg(args, 4, "grad_logits", x.dtype, {rows, cols}).data,
               float(smoothing / double(cols)),
               float((1.0 - smoothing) + smoothing / double(cols)),
               padding_idx};
    check_labels("backward", a.labels, rows, cols, padding_idx);
    if (!execute || rows == 0) return;
    OPF_DISPATCH(RunBackward)(a);
  } else {
    failf("unknown entry '%.40s' (softmax_xentropy has forward, backward)", c->entry ? c->entry : "");
  }
}

}  // namespace opf::softmax_xentropy_cpu

OPF_DEFINE_MODULE("softmax_xentropy", "cpu", opf::softmax_xentropy_cpu::isa(), opf::softmax_xentropy_cpu::call)
OPF_HOST_CODE_END
#endif  // HWY_ONCE
