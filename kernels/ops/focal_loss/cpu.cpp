// focal_loss — CPU module (contract, labels, padding and NaN: ref.cpp).
// Highway SIMD: prebuilt modules dispatch on the running CPU; the JIT builds only the host target.
//   forward: one pass: each logit is read once and its partial gradient written once, the loss
//            term summed on the way (f32 per row, f64 across rows). Rows are cut into tasks whose
//            boundaries depend only on the shape; task partials are added in task order, so the
//            loss has the same bits for any thread count (apex adds block partials with float
//            atomicAdd, in no fixed order).
//   backward: partial_grad *= grad_loss / num_positives_sum in place, elementwise.
// Per element, with z = x for a negative and -x for the positive (so that one formula serves
// both): e = exp(-|x|), u = sigmoid(z) (p for a negative, 1-p for the positive), v = 1 - u, both
// from e without cancellation; A = softplus(z), B = softplus(-z) = -log u share log1p(e);
// BCE = (1 - s/2) A + (s/2) B, a sum of non-negative terms (apex's (1-t)x + max(-x,0) + log1p
// loses a small BCE to cancellation once |x| > ~17); w = c u^gamma (u^gamma = exp(-gamma B) for a
// general gamma, 1, u, u*u for 0, 1, 2); gradient +-w (gamma v BCE + u - s/2), with u - s/2 for
// the positive's p - t (= -(1-p) + s/2: no cancellation of p against 1). exp is the modules' fast
// exp (cpu/exp-inl.h), log1p Highway's: ~80 vector ops per vector of logits read and gradient
// written, so the forward is bound by arithmetic, not memory, on one or two cores.
// Arithmetic as written: no implicit a*b+c -> fma contraction, so that every target and the JIT
// build round the same expressions; explicit fused ops are hn::MulAdd. First line of the TU on
// purpose (every function, Highway's included, must carry the same optimize options).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif
#ifndef OPF_FOCAL_LOSS_CPU_COMMON
#define OPF_FOCAL_LOSS_CPU_COMMON
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>
#include <vector>

#include "cpu/args.h"
#include "cpu/dispatch.h"
#include "cpu/parallel.h"
#include "cpu/storage.h"
#include "cpu/variant.h"
#include "opforge/module.h"

namespace opf::focal_loss_cpu {
struct Forward {
  const opf_host* host;
  int32_t dtype;
  int64_t rows, cols, real;  // real = num_real_classes
  const void* x;
  const int64_t* labels;
  float num_pos;
  float* loss;
  void* grad;
  float alpha, gamma, smoothing;
  int64_t gamma_path;  // gamma's index in kGammaKernels; its size: any other gamma
};
// The gammas with kernels of their own (Element's kGamma); the manifest's jit_values for gamma
// list the same values, so that the JIT builds a module for each (a mismatch: the module refuses
// the call in one line).
constexpr std::array<double, 3> kGammaKernels{0.0, 1.0, 2.0};
struct Backward {
  const opf_host* host;
  int32_t dtype;
  int64_t numel;
  float grad_loss, num_pos;
  void* grad;
};

// Elements per backward task, rows of ~256 KiB of logits per forward task: boundaries from the
// shape alone.
constexpr int64_t kBackwardChunk = 1 << 16;
inline int64_t forward_rows_per_task(int64_t rows, int64_t cols, size_t elem) {
  return opf::cpu::rows_per_task(rows, double(cols) * double(elem));
}
}  // namespace opf::focal_loss_cpu
#endif  // OPF_FOCAL_LOSS_CPU_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/focal_loss/cpu.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
#include "cpu/simd-inl.h"
#include "cpu/exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::focal_loss_cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;
using opf::cpu::from_f32;
using opf::cpu::to_f32;

// exp(t) for t <= 0: the modules' fast exp (cpu/exp-inl.h; on AVX-512 it needs whole vectors),
// Highway's for the one-lane tails there. Both give 0 far below exp's range.
template <class D>
HWY_INLINE hn::Vec<D> ExpNonPositive(D d, hn::Vec<D> t) {
  if constexpr (!kFastFlags || hn::MaxLanes(D()) * sizeof(float) == 64) return ExpFast(d, t);
  else return hn::Exp(d, t);
}

struct Consts {
  float alpha, gamma, tn, kn;  // tn = s/2 (a negative's target), kn = 1 - s/2
};

// One vector of logits x; pos marks the lane of the row's positive class. Returns the partial
// gradient and sets term to the loss terms (NaN for a non-finite logit, in both).
template <int kGamma, class D>
HWY_INLINE hn::Vec<D> Element(D d, hn::Vec<D> x, hn::Mask<D> pos, const Consts& k, hn::Vec<D>& term) {
  const auto zero = hn::Zero(d), one = hn::Set(d, 1.0f);
  const auto z = hn::IfThenElse(pos, hn::Neg(x), x);
  const auto e = ExpNonPositive(d, hn::Neg(hn::Abs(x)));  // (a non-finite x: masked below)
  const auto l = hn::Log1p(d, e);
  const auto a = hn::Add(hn::Max(z, zero), l);           // softplus(z)
  const auto b = hn::Add(hn::Max(hn::Neg(z), zero), l);  // softplus(-z) = -log u
  const auto r = hn::Div(one, hn::Add(one, e));
  const auto er = hn::Mul(e, r);
  const auto z_nonneg = hn::Ge(z, zero);
  const auto u = hn::IfThenElse(z_nonneg, r, er);
  const auto v = hn::IfThenElse(z_nonneg, er, r);
  const auto tn = hn::Set(d, k.tn);
  const auto bce = hn::Add(hn::Mul(hn::Set(d, k.kn), a), hn::Mul(tn, b));
  hn::Vec<D> w = hn::IfThenElse(pos, hn::Set(d, k.alpha), hn::Set(d, 1.0f - k.alpha));
  if constexpr (kGamma == 1) w = hn::Mul(w, u);
  else if constexpr (kGamma == 2) w = hn::Mul(w, hn::Mul(u, u));
  else if constexpr (kGamma < 0) w = hn::Mul(w, ExpNonPositive(d, hn::Mul(hn::Set(d, -k.gamma), b)));
  auto inner = hn::Sub(u, tn);
  if constexpr (kGamma != 0) inner = hn::MulAdd(hn::Mul(hn::Set(d, k.gamma), v), bce, inner);
  auto g = hn::Mul(w, inner);
  g = hn::IfThenElse(pos, hn::Neg(g), g);
  const auto finite = hn::IsFinite(x);
  const auto nan = hn::Set(d, std::numeric_limits<float>::quiet_NaN());
  term = hn::IfThenElse(finite, hn::Mul(w, bce), nan);
  return hn::IfThenElse(finite, g, nan);
}

// Rows [r0, r1): writes their partial gradient rows, returns the sum of their loss terms.
template <int kGamma, class S>
double Rows(const Forward& a, const Consts& k, int64_t r0, int64_t r1) {
  const hn::ScalableTag<float> d;
  const hn::CappedTag<float, 1> d1;
  const hn::RebindToSigned<decltype(d)> di;
  const hn::RebindToSigned<decltype(d1)> di1;
  const size_t N = hn::Lanes(d), real = size_t(a.real), cols = size_t(a.cols);
  const auto iota = hn::Iota(di, 0);
  double total = 0;
  for (int64_t r = r0; r < r1; ++r) {
    const S* x = static_cast<const S*>(a.x) + r * a.cols;
    S* g = static_cast<S*>(a.grad) + r * a.cols;
    const int64_t y = a.labels[r];
    if (y == -2) {  // ignored: exact zeros (all-zero bits are +0 in every storage dtype)
      std::memset(static_cast<void*>(g), 0, cols * sizeof(S));
      continue;
    }
    auto acc = hn::Zero(d);
    size_t j = 0;
    for (; j + N <= real; j += N) {
      const auto pos = hn::RebindMask(d, hn::Eq(iota, hn::Set(di, int32_t(y - int64_t(j)))));
      hn::Vec<decltype(d)> term;
      StoreRound(d, Element<kGamma>(d, LoadWiden(d, x + j), pos, k, term), g + j);
      acc = hn::Add(acc, term);
    }
    float tail = 0;
    OPF_SCALAR_LOOP
    for (; j < real; ++j) {  // the same formula, one lane at a time
      const auto pos = hn::RebindMask(d1, hn::Eq(hn::Zero(di1), hn::Set(di1, int32_t(y - int64_t(j)))));
      hn::Vec<decltype(d1)> term;
      g[j] = from_f32<S>(hn::GetLane(Element<kGamma>(d1, hn::Set(d1, to_f32(x[j])), pos, k, term)));
      tail += hn::GetLane(term);
    }
    if (cols > real) std::memset(static_cast<void*>(g + real), 0, (cols - real) * sizeof(S));  // padding classes
    total += double(SumLanes(d, acc) + tail);
  }
  return total;
}

template <class S>
void ForwardT(const Forward& a) {
  const Consts k{a.alpha, a.gamma, a.smoothing / 2, 1.0f - a.smoothing / 2};
  const int64_t chunk = forward_rows_per_task(a.rows, a.cols, sizeof(S));
  const int64_t ntasks = (a.rows + chunk - 1) / chunk;
  std::vector<double> partial(size_t(ntasks), 0.0);
  const auto run = [&](auto rows_fn) {
    opf::cpu::parallel_for(a.host, ntasks, [&](int64_t t) {
      partial[size_t(t)] = rows_fn(a, k, t * chunk, std::min(a.rows, (t + 1) * chunk));
    });
  };
  // a JIT module compiles only its variant's path (manifest jit_variant; cpu/variant.h)
  opf::cpu::run_index<"gamma", int(kGammaKernels.size()) + 1>(a.gamma_path, [&](auto path) {
    constexpr int kGamma = path < int(kGammaKernels.size()) ? int(kGammaKernels[path]) : -1;
    run(Rows<kGamma, S>);
  });
  double sum = 0;
  for (double p : partial) sum += p;  // task order: the same bits for any thread count
  *a.loss = float(sum / double(a.num_pos));
}

template <class S>
void BackwardT(const Backward& a) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const float scale = a.grad_loss / a.num_pos;
  const auto vs = hn::Set(d, scale);
  opf::cpu::parallel_rows(a.host, a.numel, kBackwardChunk, [&](int64_t i0, int64_t i1) {
    S* g = static_cast<S*>(a.grad);
    size_t j = size_t(i0);
    for (; j + N <= size_t(i1); j += N) StoreRound(d, hn::Mul(LoadWiden(d, g + j), vs), g + j);
    OPF_SCALAR_LOOP
    for (; j < size_t(i1); ++j) g[j] = from_f32<S>(to_f32(g[j]) * scale);
  });
}

OPF_CPU_TARGET_ENTRIES()

}  // namespace opf::focal_loss_cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::focal_loss_cpu {
OPF_CPU_EXPORT_ENTRIES()
}  // namespace opf::focal_loss_cpu
#endif  // HWY_ONCE

#if HWY_ONCE && OPF_HOST_PART  // the host code: not in a JIT kernels module (cpu/dispatch.h)
OPF_HOST_CODE_BEGIN
namespace opf::focal_loss_cpu {
using namespace opf::cpu;

struct CallParams {
  int64_t real;
  double alpha, gamma, smoothing;
};

CallParams read_params(const Args& args) {
  const CallParams p{args.i64(0, "num_real_classes"), args.f64(1, "alpha"), args.f64(2, "gamma"),
                     args.f64(3, "label_smoothing")};
  if (!(p.alpha >= 0.0 && p.alpha <= 1.0)) failf("%s: alpha = %g is outside [0, 1]", args.entry(), p.alpha);
  if (!(p.gamma >= 0.0 && std::isfinite(p.gamma)))
    failf("%s: gamma = %g must be finite and >= 0", args.entry(), p.gamma);
  if (!(p.smoothing >= 0.0 && p.smoothing < 1.0))
    failf("%s: label_smoothing = %g is outside [0, 1)", args.entry(), p.smoothing);
  return p;
}

void forward(const opf_call* c, bool execute) {
  const Args args(c, 5, 4);
  const CallParams p = read_params(args);
  const opf_tensor& x = expect_lead(args, 0, "logits", 2, "[N, Cpad]");
  const int64_t rows = x.shape[0], cols = x.shape[1];
  const int64_t unit = 16 / int64_t(dtype_size(DType(x.dtype)));  // apex: 128-bit loads of classes
  if (cols % unit != 0)
    failf(
        "forward: argument 0 (logits) has Cpad = %lld classes, not a multiple of %lld (16 bytes of %s: pad the "
        "classes)",
        (long long)cols, (long long)unit, dtype_str(x.dtype));
  if (p.real > cols)
    failf("forward: num_real_classes = %lld exceeds Cpad = %lld of argument 0 (logits)", (long long)p.real,
          (long long)cols);
  if (p.real < unit)
    failf("forward: num_real_classes = %lld is below %lld (16 bytes of %s, apex's minimum)", (long long)p.real,
          (long long)unit, dtype_str(x.dtype));
  const int64_t* labels = static_cast<const int64_t*>(expect_arg(args, 1, "labels", OPF_I64, {rows}).data);
  const float* num_pos = static_cast<const float*>(expect_arg(args, 2, "num_positives_sum", OPF_F32, {1}).data);
  float* loss = static_cast<float*>(expect_arg(args, 3, "loss", OPF_F32, {1}).data);
  void* grad = expect_arg(args, 4, "partial_grad", x.dtype, {rows, cols}).data;
  // host data: the labels are checked before anything is written (supports() checks them too)
  for (int64_t r = 0; r < rows; ++r)
    if (labels[r] < -2 || labels[r] >= p.real)
      failf(
          "forward: labels[%lld] = %lld is outside [-2, %lld) (num_real_classes %lld; -2 ignores the row, -1 has no "
          "positive)",
          (long long)r, (long long)labels[r], (long long)p.real, (long long)p.real);
  if (!execute) return;
  if (rows == 0) {
    *loss = 0.0f;
    return;
  }
  const Forward a{c->host,
                  x.dtype,
                  rows,
                  cols,
                  p.real,
                  x.data,
                  labels,
                  *num_pos,
                  loss,
                  grad,
                  float(p.alpha),
                  float(p.gamma),
                  float(p.smoothing),
                  opf::cpu::value_index(kGammaKernels, p.gamma)};
  OPF_DISPATCH(RunForward)(a);
}

void backward(const opf_call* c, bool execute) {
  const Args args(c, 3, 4);
  read_params(args);
  const float* g = static_cast<const float*>(expect_arg(args, 0, "grad_loss", OPF_F32, {1}).data);
  const opf_tensor& pg = expect_lead(args, 1, "partial_grad", 2, "[N, Cpad]");
  const float* num_pos = static_cast<const float*>(expect_arg(args, 2, "num_positives_sum", OPF_F32, {1}).data);
  if (pg.data == nullptr && numel(pg) > 0) failf("backward: argument 1 (partial_grad) has no data");
  if (!execute || numel(pg) == 0) return;
  const Backward a{c->host, pg.dtype, numel(pg), *g, *num_pos, pg.data};
  OPF_DISPATCH(RunBackward)(a);
}

void call(const opf_call* c, bool execute) {
  const std::string_view entry = c->entry ? c->entry : "";
  if (entry == "forward") return forward(c, execute);
  if (entry == "backward") return backward(c, execute);
  failf("unknown entry '%.40s' (focal_loss has forward, backward)", c->entry ? c->entry : "");
}

}  // namespace opf::focal_loss_cpu

OPF_DEFINE_MODULE("focal_loss", "cpu", opf::focal_loss_cpu::isa(), opf::focal_loss_cpu::call)
OPF_HOST_CODE_END
#endif  // HWY_ONCE
