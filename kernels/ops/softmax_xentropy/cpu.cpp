// softmax_xentropy — CPU module (contract, incl. padding rows, label errors and NaN: ref.cpp).
// Highway SIMD: prebuilt modules dispatch on the running CPU; the JIT builds only the host target.
// Rows are split into tasks on the caller's thread pool (cpu/parallel.h); rows are independent,
// so any thread count gives the same bits.
//   forward: pass 1 reads the row from memory for its max m; pass 2 runs from L1/L2 (the row is
//            at most a few hundred KB) and sums exp(x - m) and x - m, while prefetching the next
//            row. Per row only loss and lse are written: the traffic is the logits, once.
//            loss = log S + (1-s)(m - x_y) - (s/C) sum (x - m): non-negative terms, no cancellation.
//   backward: one pass: dx = g exp(x - lse) - g s/C (- g (1-s) at the label), logits read once,
//            the gradient written once (non-temporal stores when it exceeds the cache).
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
#include "cpu/storage.h"
#include "opforge/module.h"

namespace opf::softmax_xentropy_cpu {
constexpr float kExpFloor = -87.0f;  // exp(-87) ~ 1.6e-38: the smallest normal range
constexpr float kExpCeil = 88.0f;    // exp(88) ~ 1.7e38: below FLT_MAX
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
  float smoothing;
  int64_t padding_idx;
};
}  // namespace opf::softmax_xentropy_cpu
#endif  // OPF_SOFTMAX_XENTROPY_CPU_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/softmax_xentropy/cpu.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::softmax_xentropy_cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;
using opf::cpu::from_f32;
using opf::cpu::to_f32;

template <class S>
void ForwardT(const Forward& a) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d), n = size_t(a.cols);
  const float keep = 1.0f - a.smoothing, spread = a.smoothing / float(a.cols);
  const auto vfloor = hn::Set(d, kExpFloor);
  const int64_t chunk = opf::cpu::rows_per_task(a.rows, double(n) * sizeof(S));
  opf::cpu::parallel_rows(a.host, a.rows, chunk, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const S* x = static_cast<const S*>(a.x) + r * a.cols;
      // pass 1 (from memory): the max. Four accumulators: the row is often already in cache
      // (prefetched by the previous row's pass 2), where one max chain would be latency-bound.
      auto m0 = hn::Set(d, -std::numeric_limits<float>::infinity()), m1 = m0, m2 = m0, m3 = m0;
      size_t j = 0;
      for (; j + 4 * N <= n; j += 4 * N) {
        m0 = hn::Max(m0, LoadWiden(d, x + j));
        m1 = hn::Max(m1, LoadWiden(d, x + j + N));
        m2 = hn::Max(m2, LoadWiden(d, x + j + 2 * N));
        m3 = hn::Max(m3, LoadWiden(d, x + j + 3 * N));
      }
      for (; j + N <= n; j += N) m0 = hn::Max(m0, LoadWiden(d, x + j));
      float m = MaxLanes(d, hn::Max(hn::Max(m0, m1), hn::Max(m2, m3)));
      for (; j < n; ++j) m = std::max(m, to_f32(x[j]));  // (a NaN is caught by the sum below)

      // pass 2 (from cache): S = sum exp(x - m), T = sum (x - m). T is NaN when the row holds a
      // NaN (SIMD max and the exp clamp may drop one). exp(t < -87) is taken as exp(-87): it
      // adds nothing to S >= 1.
      const S* next = r + 1 < r1 ? x + a.cols : x;  // fetch the next row meanwhile
      const auto vm = hn::Set(d, m);
      auto s0 = hn::Zero(d), s1 = s0, t0 = s0, t1 = s0;
      for (j = 0; j + 2 * N <= n; j += 2 * N) {
        PrefetchSpan(next + j, 2 * N);
        const auto ta = hn::Sub(LoadWiden(d, x + j), vm);
        const auto tb = hn::Sub(LoadWiden(d, x + j + N), vm);
        t0 = hn::Add(t0, ta);
        t1 = hn::Add(t1, tb);
        s0 = hn::Add(s0, ExpNormalRange(d, hn::Max(ta, vfloor)));
        s1 = hn::Add(s1, ExpNormalRange(d, hn::Max(tb, vfloor)));
      }
      for (; j + N <= n; j += N) {
        const auto t = hn::Sub(LoadWiden(d, x + j), vm);
        t0 = hn::Add(t0, t);
        s0 = hn::Add(s0, ExpNormalRange(d, hn::Max(t, vfloor)));
      }
      float sum = SumLanes(d, hn::Add(s0, s1)), tsum = SumLanes(d, hn::Add(t0, t1));
      for (; j < n; ++j) {
        const float t = to_f32(x[j]) - m;
        tsum += t;
        sum += std::exp(std::max(t, kExpFloor));
      }

      const int64_t label = a.labels[r];
      const bool pad = label == a.padding_idx;
      if (!std::isfinite(m) || std::isnan(tsum)) {  // NaN, or a max of +-inf (inf - inf)
        a.lse[r] = std::numeric_limits<float>::quiet_NaN();
        a.loss[r] = pad ? 0.0f : std::numeric_limits<float>::quiet_NaN();
        continue;
      }
      const float log_sum = std::log(sum);
      a.lse[r] = m + log_sum;
      if (pad) {
        a.loss[r] = 0.0f;
        continue;
      }
      float loss = log_sum + keep * (m - to_f32(x[label]));
      if (a.smoothing != 0.0f) loss = loss - spread * tsum;  // s = 0: plain cross entropy, no 0 * -inf
      a.loss[r] = loss;
    }
  });
}

template <class S>
void BackwardT(const Backward& a) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const size_t N = hn::Lanes(d), n = size_t(a.cols);
  const float keep = 1.0f - a.smoothing, spread = a.smoothing / float(a.cols);
  const auto vfloor = hn::Set(d, kExpFloor), vceil = hn::Set(d, kExpCeil), zero = hn::Zero(d);
  const auto iota = hn::Iota(di, 0);
  const bool stream = double(a.rows) * double(n) * sizeof(S) >= double(OPF_TUNE_STREAM_MIN_BYTES);
  const int64_t chunk = opf::cpu::rows_per_task(a.rows, 2.0 * double(n) * sizeof(S));
  opf::cpu::parallel_rows(a.host, a.rows, chunk, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const S* x = static_cast<const S*>(a.x) + r * a.cols;
      S* dx = static_cast<S*>(a.dx) + r * a.cols;
      const int64_t label = a.labels[r];
      if (label == a.padding_idx) {  // exact zeros, whatever the logits and g hold
        WriteRow(d, dx, n, stream, [&](size_t) { return zero; }, [](size_t) { return 0.0f; });
        continue;
      }
      // dx = g e - g s/C, and g e - g (1 - s + s/C) at the label: one MulAdd per element
      const float g = a.grad[r], lse = a.lse[r];
      const float off = -(g * spread), off_label = -(g * keep + g * spread);
      const auto vg = hn::Set(d, g), vlse = hn::Set(d, lse), voff = hn::Set(d, off), voff_label = hn::Set(d, off_label);
      // exp(t) for t in [-87, 88], 0 below (t = x - lse <= 0 with the forward's lse); t * 0
      // carries a NaN logit or lse into its element, which the clamp would drop
      const auto exp_vec = [&](size_t k) {
        const auto t = hn::Sub(LoadWiden(d, x + k), vlse);
        const auto e = hn::MulAdd(t, zero, ExpNormalRange(d, hn::Min(hn::Max(t, vfloor), vceil)));
        return hn::IfThenZeroElse(hn::Lt(t, vfloor), e);
      };
      WriteRow(
          d, dx, n, stream,
          [&](size_t k) {
            const auto e = exp_vec(k);
            const int64_t at = label - int64_t(k);
            if (at >= 0 && at < int64_t(N)) {
              const auto is_label = hn::RebindMask(d, hn::Eq(iota, hn::Set(di, int32_t(at))));
              return hn::MulAdd(vg, e, hn::IfThenElse(is_label, voff_label, voff));
            }
            return hn::MulAdd(vg, e, voff);
          },
          [&](size_t k) {
            const float e = std::exp(to_f32(x[k]) - lse);
            return g * e + (int64_t(k) == label ? off_label : off);
          });
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
    Forward a{c->host, x.dtype, rows, cols, x.data,
              static_cast<const int64_t*>(expect_arg(args, 1, "labels", OPF_I64, {rows}).data),
              static_cast<float*>(expect_arg(args, 2, "losses", OPF_F32, {rows}).data),
              static_cast<float*>(expect_arg(args, 3, "max_log_sum_exp", OPF_F32, {rows}).data),
              float(smoothing), padding_idx};
    if (!execute || rows == 0) return;
    check_labels("forward", a.labels, rows, cols, padding_idx);
    HWY_DYNAMIC_DISPATCH(RunForward)(a);
  } else if (entry == "backward") {
    const Args args(c, 5, 2);
    const double smoothing = args.f64(0, "smoothing");
    const int64_t padding_idx = args.i64(1, "padding_idx");
    if (!(smoothing >= 0.0 && smoothing < 1.0)) failf("backward: smoothing = %g is outside [0, 1)", smoothing);
    const opf_tensor& x = expect_lead(args, 1, "logits", 2, "[N, C]");
    const int64_t rows = x.shape[0], cols = x.shape[1];
    if (cols < 1) failf("backward: argument 1 (logits) has C = %lld classes, needs at least 1", (long long)cols);
    Backward a{c->host, x.dtype, rows, cols,
               static_cast<const float*>(expect_arg(args, 0, "grad_losses", OPF_F32, {rows}).data),
               x.data,
               static_cast<const float*>(expect_arg(args, 2, "max_log_sum_exp", OPF_F32, {rows}).data),
               static_cast<const int64_t*>(expect_arg(args, 3, "labels", OPF_I64, {rows}).data),
               expect_arg(args, 4, "grad_logits", x.dtype, {rows, cols}).data, float(smoothing), padding_idx};
    if (!execute || rows == 0) return;
    check_labels("backward", a.labels, rows, cols, padding_idx);
    HWY_DYNAMIC_DISPATCH(RunBackward)(a);
  } else {
    failf("unknown entry '%.40s' (softmax_xentropy has forward, backward)", c->entry ? c->entry : "");
  }
}

}  // namespace opf::softmax_xentropy_cpu

OPF_DEFINE_MODULE("softmax_xentropy", "cpu", opf::softmax_xentropy_cpu::isa(), opf::softmax_xentropy_cpu::call)
#endif  // HWY_ONCE
