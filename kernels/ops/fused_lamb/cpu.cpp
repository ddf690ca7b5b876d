// fused_lamb — CPU module (contract: ref.cpp). Highway SIMD: prebuilt modules dispatch on the
// running CPU; the JIT builds only the host target.
// The math forces three passes over memory, and this is all it makes: the global grad norm must be
// complete before any moment is updated, and a tensor's update norm before any of its params.
//   A: read g -> sum of g^2 per chunk (the norm, and the non-finite check: a NaN/inf g makes its
//      chunk's sum non-finite, as apex's l2norm)
//   B: read g, p, m, v; write u (into g), m, v; sum p^2 and u^2 per chunk (u as rounded to T)
//   C: read u, p; write p -= ratio_tensor * u
// Without a trust ratio (weight_decay 0 and not use_nvlamb) the ratio is lr everywhere, so B
// updates p itself and C is skipped. Torch eager runs some fifteen passes for the same step.
// Work is cut the multi_tensor_apply way: every tensor into chunks of OPF_TUNE_CHUNK elements (its
// last chunk smaller), and consecutive chunks, across tensors, grouped into tasks of at least
// OPF_TUNE_CHUNK elements. Each chunk's sums are f32, from the same vector code wherever the
// chunk lies (a tensor's last partial vector goes through zero-padded lane buffers, whose u is
// exactly 0), and are added in f64 in list order after the pass, so any thread count gives the
// same bits. The global norm combines exactly like multi_tensor's l2norm (per tensor, then total).
// Arithmetic as written (ref.cpp's contract): no implicit a*b+c -> fma contraction; the fused
// operations are the explicit hn::MulAdd / hn::NegMulAdd below. First line of the TU on purpose:
// every function, Highway's included, must carry the same optimize options to stay inlinable.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif
#ifndef OPF_TUNE_CHUNK
#define OPF_TUNE_CHUNK 65536
#endif

#ifndef OPF_FUSED_LAMB_CPU_COMMON
#define OPF_FUSED_LAMB_CPU_COMMON
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
#include "cpu/storage.h"
#include "cpu/variant.h"
#include "opforge/module.h"

namespace opf::fused_lamb_cpu {
// One contiguous run of elements of one tensor.
struct Piece {
  int32_t tensor;
  int64_t begin, end;
};
struct Step {
  const opf_host* host;
  int32_t dtype;
  const opf_tensor *g, *p, *m, *v;  // the lists, each `count` long
  int64_t count;
  std::vector<Piece> pieces;        // in list order
  std::vector<int64_t> task_start;  // pieces of task t: [task_start[t], task_start[t + 1])
  float b1, b3, b2, omb2, lr, eps, wd, rbc1, rbc2, mgn;
  bool adamw, trust;
  // filled by the passes, one entry per piece
  std::vector<float> g2, p2, u2;
  std::vector<float> ratio;  // per tensor, for pass C
};
}  // namespace opf::fused_lamb_cpu
#endif  // OPF_FUSED_LAMB_CPU_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/fused_lamb/cpu.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::fused_lamb_cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;

// f32 sum of squares of x[0, n): four vector accumulators, a padded last vector, then the lanes.
template <class S>
float SumSquares(const S* HWY_RESTRICT x, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  auto a0 = hn::Zero(d), a1 = a0, a2 = a0, a3 = a0;
  size_t j = 0;
  for (; j + 4 * N <= n; j += 4 * N) {
    const auto v0 = LoadWiden(d, x + j), v1 = LoadWiden(d, x + j + N), v2 = LoadWiden(d, x + j + 2 * N),
               v3 = LoadWiden(d, x + j + 3 * N);
    a0 = hn::MulAdd(v0, v0, a0);
    a1 = hn::MulAdd(v1, v1, a1);
    a2 = hn::MulAdd(v2, v2, a2);
    a3 = hn::MulAdd(v3, v3, a3);
  }
  for (; j + N <= n; j += N) {
    const auto v = LoadWiden(d, x + j);
    a0 = hn::MulAdd(v, v, a0);
  }
  if (j < n) {
    HWY_ALIGN S buf[hn::MaxLanes(d)] = {};
    std::memcpy(buf, x + j, (n - j) * sizeof(S));
    const auto v = LoadWiden(d, buf);
    a0 = hn::MulAdd(v, v, a0);
  }
  return SumLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)));
}

struct Consts {
  hn::Vec<hn::ScalableTag<float>> rclip, b1, b3, b2, omb2, lr, eps, wd, rbc1, rbc2;
};

// Stage 1 on one vector at g, p (storage S), m, v: m, v updated, u stored (rounded) at g and
// returned as stored. kFused: also p = p - lr*u at p (no trust ratio); else p2 += p^2, u2 += u^2.
template <bool kAdamW, bool kFused, class D, class S, class V = hn::Vec<D>>
HWY_INLINE void Update(D d, const Consts& c, S* HWY_RESTRICT g, S* HWY_RESTRICT p, float* HWY_RESTRICT m,
                       float* HWY_RESTRICT v, V& p2, V& u2) {
  const V pv = LoadWiden(d, p);
  V gv = hn::Mul(LoadWiden(d, g), c.rclip);
  if constexpr (!kAdamW) gv = hn::MulAdd(c.wd, pv, gv);
  const V mv = hn::MulAdd(c.b1, hn::LoadU(d, m), hn::Mul(c.b3, gv));
  const V vv = hn::MulAdd(c.b2, hn::LoadU(d, v), hn::Mul(c.omb2, hn::Mul(gv, gv)));
  hn::StoreU(mv, d, m);
  hn::StoreU(vv, d, v);
  V u = hn::Div(hn::Mul(mv, c.rbc1), hn::Add(hn::Sqrt(hn::Mul(vv, c.rbc2)), c.eps));
  if constexpr (kAdamW) u = hn::MulAdd(c.wd, pv, u);
  StoreRound(d, u, g);
  if constexpr (!std::is_same_v<S, float>) u = LoadWiden(d, g);  // the update as stage 2 sees it
  if constexpr (kFused) {
    StoreRound(d, hn::NegMulAdd(c.lr, u, pv), p);
  } else {
    p2 = hn::MulAdd(pv, pv, p2);
    u2 = hn::MulAdd(u, u, u2);
  }
}

// Stage 1 on elements [0, n) of one tensor; the chunk's sums of p^2 and u^2 (unfused).
template <bool kAdamW, bool kFused, class S>
void Stage1(const Consts& c, S* HWY_RESTRICT g, S* HWY_RESTRICT p, float* HWY_RESTRICT m, float* HWY_RESTRICT v,
            size_t n, float& p2_out, float& u2_out) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  auto p2 = hn::Zero(d), u2 = p2;
  size_t j = 0;
  for (; j + N <= n; j += N) Update<kAdamW, kFused>(d, c, g + j, p + j, m + j, v + j, p2, u2);
  if (j < n) {  // the same code on zero-padded copies: u of a padding lane is 0/(0 + eps) = 0
    const size_t r = n - j;
    HWY_ALIGN S gb[hn::MaxLanes(d)] = {}, pb[hn::MaxLanes(d)] = {};
    HWY_ALIGN float mb[hn::MaxLanes(d)] = {}, vb[hn::MaxLanes(d)] = {};
    std::memcpy(gb, g + j, r * sizeof(S));
    std::memcpy(pb, p + j, r * sizeof(S));
    std::memcpy(mb, m + j, r * sizeof(float));
    std::memcpy(vb, v + j, r * sizeof(float));
    Update<kAdamW, kFused>(d, c, gb, pb, mb, vb, p2, u2);
    std::memcpy(g + j, gb, r * sizeof(S));
    if (kFused) std::memcpy(p + j, pb, r * sizeof(S));
    std::memcpy(m + j, mb, r * sizeof(float));
    std::memcpy(v + j, vb, r * sizeof(float));
  }
  p2_out = SumLanes(d, p2);
  u2_out = SumLanes(d, u2);
}

// Stage 2 on elements [0, n): p = p - ratio*u.
template <class S>
void Stage2(const S* HWY_RESTRICT u, S* HWY_RESTRICT p, size_t n, float ratio) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto r = hn::Set(d, ratio);
  size_t j = 0;
  for (; j + N <= n; j += N) StoreRound(d, hn::NegMulAdd(r, LoadWiden(d, u + j), LoadWiden(d, p + j)), p + j);
  if (j < n) {
    HWY_ALIGN S ub[hn::MaxLanes(d)] = {}, pb[hn::MaxLanes(d)] = {};
    std::memcpy(ub, u + j, (n - j) * sizeof(S));
    std::memcpy(pb, p + j, (n - j) * sizeof(S));
    StoreRound(d, hn::NegMulAdd(r, LoadWiden(d, ub), LoadWiden(d, pb)), pb);
    std::memcpy(p + j, pb, (n - j) * sizeof(S));
  }
}

// f(piece index, piece) for every piece, tasks in parallel.
template <class F>
void ForPieces(const Step& a, F&& f) {
  opf::cpu::parallel_for(a.host, int64_t(a.task_start.size()) - 1, [&](int64_t t) {
    for (int64_t k = a.task_start[size_t(t)]; k < a.task_start[size_t(t) + 1]; ++k) f(size_t(k), a.pieces[size_t(k)]);
  });
}

template <class S>
void NormT(Step& a) {
  a.g2.assign(a.pieces.size(), 0.0f);
  ForPieces(a, [&](size_t k, const Piece& pc) {
    a.g2[k] = SumSquares(static_cast<const S*>(a.g[pc.tensor].data) + pc.begin, size_t(pc.end - pc.begin));
  });
}

template <bool kAdamW, bool kFused, class S>
void Stage1T(Step& a, float rclip) {
  const hn::ScalableTag<float> d;
  const Consts c{hn::Set(d, rclip), hn::Set(d, a.b1),  hn::Set(d, a.b3), hn::Set(d, a.b2),   hn::Set(d, a.omb2),
                 hn::Set(d, a.lr),  hn::Set(d, a.eps), hn::Set(d, a.wd), hn::Set(d, a.rbc1), hn::Set(d, a.rbc2)};
  a.p2.assign(a.pieces.size(), 0.0f);
  a.u2.assign(a.pieces.size(), 0.0f);
  ForPieces(a, [&](size_t k, const Piece& pc) {
    const size_t i = size_t(pc.tensor), b = size_t(pc.begin);
    Stage1<kAdamW, kFused>(c, static_cast<S*>(a.g[i].data) + b, static_cast<S*>(a.p[i].data) + b,
                           static_cast<float*>(a.m[i].data) + b, static_cast<float*>(a.v[i].data) + b,
                           size_t(pc.end - pc.begin), a.p2[k], a.u2[k]);
  });
}

template <class S>
void Stage2T(Step& a) {
  ForPieces(a, [&](size_t, const Piece& pc) {
    const size_t i = size_t(pc.tensor), b = size_t(pc.begin);
    Stage2(static_cast<const S*>(a.g[i].data) + b, static_cast<S*>(a.p[i].data) + b, size_t(pc.end - pc.begin),
           a.ratio[i]);
  });
}

void RunNorm(Step& a) {
  opf::cpu::run_storage<"step">(a.dtype, [&](auto s) { NormT<decltype(s)>(a); });
}
void RunStage1(Step& a, float rclip) {
  opf::cpu::run_storage<"step">(a.dtype, [&](auto s) {
    using S = decltype(s);
    // a JIT module compiles two of the four (manifest jit_variant: adam_w_mode)
    opf::cpu::run_flag<"adam_w_mode">(a.adamw, [&](auto w) {
      constexpr bool kAdamW = decltype(w)::value;
      a.trust ? Stage1T<kAdamW, false, S>(a, rclip) : Stage1T<kAdamW, true, S>(a, rclip);
    });
  });
}
void RunStage2(Step& a) {
  opf::cpu::run_storage<"step">(a.dtype, [&](auto s) { Stage2T<decltype(s)>(a); });
}
const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace opf::fused_lamb_cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::fused_lamb_cpu {
OPF_KERNEL_EXPORT(RunNorm);
OPF_KERNEL_EXPORT(RunStage1);
OPF_KERNEL_EXPORT(RunStage2);
OPF_CPU_EXPORT_TARGET()
}  // namespace opf::fused_lamb_cpu
#endif  // HWY_ONCE

#if HWY_ONCE && OPF_HOST_PART  // the host code: not in a JIT kernels module (cpu/dispatch.h)
OPF_HOST_CODE_BEGIN
namespace opf::fused_lamb_cpu {
using namespace opf::cpu;

// Every tensor of list `name` must have `dtype` and as many elements as grads[k].
void check_list(const Args& args, TensorList list, const char* name, TensorList grads, int32_t dtype) {
  const char* e = args.entry();
  if (list.size() != grads.size())
    failf("%s: list %s has %zu tensors, grads has %zu", e, name, list.size(), grads.size());
  for (size_t k = 0; k < list.size(); ++k) {
    const opf_tensor& t = list[k];
    if (t.dtype != dtype)
      failf("%s: %s[%zu] has dtype %s, expected %s%s", e, name, k, dtype_str(t.dtype), dtype_str(dtype),
            dtype == OPF_F32 && std::string_view(name).starts_with("exp_avg") ? " (optimizer states are f32)"
                                                                              : " (the dtype of grads)");
    if (numel(t) != numel(grads[k]))
      failf("%s: %s[%zu] has %lld elements, grads[%zu] has %lld", e, name, k, (long long)numel(t), k,
            (long long)numel(grads[k]));
    if (numel(t) > 0 && !t.data) failf("%s: %s[%zu] has no data", e, name, k);
  }
}

void check_param(const char* e, const char* name, double v, double lo, bool lo_open, double hi, bool hi_open) {
  const bool ok = (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  if (!ok)
    failf("%s: param %s = %g is outside %c%g, %g%c", e, name, v, lo_open ? '(' : '[', lo, hi, hi_open ? ')' : ']');
}

// Chunks of OPF_TUNE_CHUNK elements per tensor; tasks of consecutive chunks, >= OPF_TUNE_CHUNK.
void plan(Step& a, TensorList grads) {
  const int64_t chunk = OPF_TUNE_CHUNK;
  a.task_start.push_back(0);
  int64_t in_task = 0;
  for (size_t k = 0; k < grads.size(); ++k) {
    const int64_t n = numel(grads[k]);
    for (int64_t b = 0; b < n; b += chunk) {
      const int64_t end = std::min(n, b + chunk);
      a.pieces.push_back({int32_t(k), b, end});
      in_task += end - b;
      if (in_task >= chunk) {
        a.task_start.push_back(int64_t(a.pieces.size()));
        in_task = 0;
      }
    }
  }
  if (in_task > 0) a.task_start.push_back(int64_t(a.pieces.size()));
}

// Per tensor, the f64 sum of its pieces' f32 partial sums, in piece order.
std::vector<double> per_tensor(const Step& a, const std::vector<float>& partial) {
  std::vector<double> s(size_t(a.count), 0.0);
  for (size_t k = 0; k < a.pieces.size(); ++k) s[size_t(a.pieces[k].tensor)] += double(partial[k]);
  return s;
}

void call(const opf_call* c, bool execute) {
  const std::string_view entry = c->entry ? c->entry : "";
  if (entry != "step") failf("unknown entry '%.40s' (fused_lamb has step)", c->entry ? c->entry : "");
  const Args args(c, 5, 11);
  const char* e = args.entry();
  const double inf = HUGE_VAL;
  const double lr = args.f64(0, "lr"), beta1 = args.f64(1, "beta1"), beta2 = args.f64(2, "beta2"),
               eps = args.f64(3, "eps"), wd = args.f64(5, "weight_decay"), mgn = args.f64(9, "max_grad_norm");
  const int64_t step = args.i64(4, "step");
  const bool bias_correction = args.flag(6, "bias_correction"), adamw = args.flag(7, "adam_w_mode"),
             grad_averaging = args.flag(8, "grad_averaging"), nvlamb = args.flag(10, "use_nvlamb");
  check_param(e, "lr", lr, 0, false, inf, false);
  check_param(e, "beta1", beta1, 0, false, 1, true);
  check_param(e, "beta2", beta2, 0, false, 1, true);
  check_param(e, "eps", eps, 0, true, inf, false);
  check_param(e, "weight_decay", wd, 0, false, inf, false);
  check_param(e, "max_grad_norm", mgn, 0, true, inf, false);
  if (step < 1) failf("%s: param step = %lld must be >= 1", e, (long long)step);

  const auto grads = args.list(0, "grads"), params = args.list(1, "params"), exp_avg = args.list(2, "exp_avg"),
             exp_avg_sq = args.list(3, "exp_avg_sq");
  const opf_tensor& flag = expect_arg(args, 4, "noop_flag", OPF_I32, {1});
  const int32_t dtype = grads.empty() ? OPF_F32 : grads[0].dtype;
  if (!grads.empty() && !is_float_storage(dtype))
    failf("%s: grads[0] has dtype %s, expected f32, f16 or bf16", e, dtype_str(dtype));
  check_list(args, grads, "grads", grads, dtype);
  check_list(args, params, "params", grads, dtype);
  check_list(args, exp_avg, "exp_avg", grads, OPF_F32);
  check_list(args, exp_avg_sq, "exp_avg_sq", grads, OPF_F32);
  if (!execute || grads.empty()) return;

  Step a{};
  a.host = c->host;
  a.dtype = dtype;
  a.g = grads.data();
  a.p = params.data();
  a.m = exp_avg.data();
  a.v = exp_avg_sq.data();
  a.count = int64_t(grads.size());
  // f32 factors from double host arithmetic (ref.cpp's contract)
  a.b1 = float(beta1);
  a.b3 = grad_averaging ? float(1.0 - beta1) : 1.0f;
  a.b2 = float(beta2);
  a.omb2 = float(1.0 - beta2);
  a.lr = float(lr);
  a.eps = float(eps);
  a.wd = float(wd);
  a.mgn = float(mgn);
  a.rbc1 = bias_correction ? float(1.0 / (1.0 - std::pow(beta1, double(step)))) : 1.0f;
  a.rbc2 = bias_correction ? float(1.0 / (1.0 - std::pow(beta2, double(step)))) : 1.0f;
  a.adamw = adamw;
  a.trust = wd != 0 || nvlamb;
  plan(a, grads);
  if (a.pieces.empty()) return;

  OPF_DISPATCH(RunNorm)(a);
  bool nonfinite = false;
  for (float s : a.g2) nonfinite |= !std::isfinite(s);
  double g2 = 0;
  for (double s : per_tensor(a, a.g2)) g2 += s;
  const float G = float(std::sqrt(g2));
  // a NaN G compares false (no clipping), an infinite one gives 0 (as apex's g / (G / mgn))
  const float rclip = G > a.mgn ? float(double(a.mgn) / double(G)) : 1.0f;

  OPF_DISPATCH(RunStage1)(a, rclip);
  if (a.trust) {
    const std::vector<double> p2 = per_tensor(a, a.p2), u2 = per_tensor(a, a.u2);
    a.ratio.assign(size_t(a.count), a.lr);
    for (size_t k = 0; k < size_t(a.count); ++k) {
      const float pn = float(std::sqrt(p2[k])), un = float(std::sqrt(u2[k]));
      if (pn != 0 && un != 0) a.ratio[k] = a.lr * (pn / un);
    }
    OPF_DISPATCH(RunStage2)(a);
  }
  if (nonfinite) *static_cast<int32_t*>(flag.data) = 1;
}

}  // namespace opf::fused_lamb_cpu

OPF_DEFINE_MODULE("fused_lamb", "cpu", opf::fused_lamb_cpu::isa(), opf::fused_lamb_cpu::call)
OPF_HOST_CODE_END
#endif  // HWY_ONCE
