// fused_adam — CPU module (contract: ref.cpp). Highway SIMD: prebuilt modules dispatch on the
// running CPU; the JIT builds only the host target.
// One pass over memory: each element's g, p, m, v are read once and p, m, v written back in place
// (28 bytes per element for f32 params, 22 for f16/bf16). Work is cut the multi_tensor_apply way:
// every tensor into chunks of OPF_TUNE_CHUNK elements (its last chunk smaller), and consecutive
// chunks, across tensors, grouped into tasks of at least OPF_TUNE_CHUNK elements, so that a list of
// many small tensors does not become one task each. Boundaries come from the sizes alone, and the
// update is elementwise, so any thread count gives the same bits. Each task reports whether it saw
// a non-finite gradient; the caller ORs them into noop_flag after the tasks end.
// Every element goes through the same vector code: a tensor's last partial vector is copied into
// padded lane buffers, updated and copied back, so an element's result does not depend on where a
// chunk boundary or a tensor's end falls.
// Arithmetic as written (ref.cpp's contract): no implicit a*b+c -> fma contraction; the fused
// operations are the explicit hn::MulAdd / hn::NegMulAdd below. First line of the TU on purpose:
// every function, Highway's included, must carry the same optimize options to stay inlinable.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif
#ifndef OPF_TUNE_CHUNK
#define OPF_TUNE_CHUNK 65536
#endif

#ifndef OPF_FUSED_ADAM_CPU_COMMON
#define OPF_FUSED_ADAM_CPU_COMMON
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "cpu/args.h"
#include "cpu/dispatch.h"
#include "cpu/parallel.h"
#include "cpu/storage.h"
#include "opforge/module.h"

namespace opf::fused_adam_cpu {
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
  float b1, omb1, b2, omb2, lr, eps, wd, rbc1, rbc2;
  bool adamw;
  bool nonfinite;  // out: a gradient element was NaN or infinite
};
}  // namespace opf::fused_adam_cpu
#endif  // OPF_FUSED_ADAM_CPU_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/fused_adam/cpu.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::fused_adam_cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;

struct Consts {
  hn::Vec<hn::ScalableTag<float>> b1, omb1, b2, omb2, lr, eps, wd, rbc1, rbc2;
};

// One vector of elements: g, p in, m, v in and out; returns the new p. probe accumulates g*0,
// which stays 0 unless some g is NaN or infinite.
template <bool kAdamW, class D, class V = hn::Vec<D>>
HWY_INLINE V Update(D d, const Consts& c, V g, V p, V& m, V& v, V& probe) {
  probe = hn::MulAdd(g, hn::Zero(d), probe);
  if constexpr (!kAdamW) g = hn::MulAdd(c.wd, p, g);
  m = hn::MulAdd(c.b1, m, hn::Mul(c.omb1, g));
  v = hn::MulAdd(c.b2, v, hn::Mul(c.omb2, hn::Mul(g, g)));
  auto u = hn::Div(hn::Mul(m, c.rbc1), hn::Add(hn::Sqrt(hn::Mul(v, c.rbc2)), c.eps));
  if constexpr (kAdamW) u = hn::MulAdd(c.wd, p, u);
  return hn::NegMulAdd(c.lr, u, p);
}

// Elements [0, n) of one tensor's g, p, m, v; true if a gradient element is not finite.
template <bool kAdamW, class S>
bool Run(const Consts& c, const S* HWY_RESTRICT g, S* HWY_RESTRICT p, float* HWY_RESTRICT m, float* HWY_RESTRICT v,
         size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  auto probe = hn::Zero(d);
  size_t j = 0;
  for (; j + N <= n; j += N) {
    auto mv = hn::LoadU(d, m + j), vv = hn::LoadU(d, v + j);
    const auto pv = Update<kAdamW>(d, c, LoadWiden(d, g + j), LoadWiden(d, p + j), mv, vv, probe);
    StoreRound(d, pv, p + j);
    hn::StoreU(mv, d, m + j);
    hn::StoreU(vv, d, v + j);
  }
  if (j < n) {  // the same code on padded copies (padding: zeros, which stay finite)
    const size_t r = n - j;
    HWY_ALIGN S gb[hn::MaxLanes(d)] = {}, pb[hn::MaxLanes(d)] = {};
    HWY_ALIGN float mb[hn::MaxLanes(d)] = {}, vb[hn::MaxLanes(d)] = {};
    std::memcpy(gb, g + j, r * sizeof(S));
    std::memcpy(pb, p + j, r * sizeof(S));
    std::memcpy(mb, m + j, r * sizeof(float));
    std::memcpy(vb, v + j, r * sizeof(float));
    auto mv = hn::Load(d, mb), vv = hn::Load(d, vb);
    const auto pv = Update<kAdamW>(d, c, LoadWiden(d, gb), LoadWiden(d, pb), mv, vv, probe);
    StoreRound(d, pv, pb);
    hn::Store(mv, d, mb);
    hn::Store(vv, d, vb);
    std::memcpy(p + j, pb, r * sizeof(S));
    std::memcpy(m + j, mb, r * sizeof(float));
    std::memcpy(v + j, vb, r * sizeof(float));
  }
  return !hn::AllTrue(d, hn::Eq(probe, hn::Zero(d)));
}

template <bool kAdamW, class S>
void StepT(Step& a) {
  const hn::ScalableTag<float> d;
  const Consts c{hn::Set(d, a.b1),  hn::Set(d, a.omb1), hn::Set(d, a.b2),   hn::Set(d, a.omb2), hn::Set(d, a.lr),
                 hn::Set(d, a.eps), hn::Set(d, a.wd),   hn::Set(d, a.rbc1), hn::Set(d, a.rbc2)};
  const int64_t ntasks = int64_t(a.task_start.size()) - 1;
  std::vector<uint8_t> bad(size_t(ntasks), 0);
  opf::cpu::parallel_for(a.host, ntasks, [&](int64_t t) {
    bool any = false;
    for (int64_t k = a.task_start[size_t(t)]; k < a.task_start[size_t(t) + 1]; ++k) {
      const Piece& pc = a.pieces[size_t(k)];
      const size_t i = size_t(pc.tensor), b = size_t(pc.begin);
      any |= Run<kAdamW>(c, static_cast<const S*>(a.g[i].data) + b, static_cast<S*>(a.p[i].data) + b,
                         static_cast<float*>(a.m[i].data) + b, static_cast<float*>(a.v[i].data) + b,
                         size_t(pc.end - pc.begin));
    }
    bad[size_t(t)] = any;
  });
  a.nonfinite = std::find(bad.begin(), bad.end(), uint8_t(1)) != bad.end();
}

void RunStep(Step& a) {
  opf::cpu::run_storage<"step">(a.dtype, [&](auto s) {
    if (a.adamw) {
      StepT<true, decltype(s)>(a);
    } else {
      StepT<false, decltype(s)>(a);
    }
  });
}
const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace opf::fused_adam_cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::fused_adam_cpu {
OPF_KERNEL_EXPORT(RunStep);
OPF_CPU_EXPORT_TARGET()
}  // namespace opf::fused_adam_cpu
#endif  // HWY_ONCE

#if HWY_ONCE && OPF_HOST_PART  // the host code: not in a JIT kernels module (cpu/dispatch.h)
OPF_HOST_CODE_BEGIN
namespace opf::fused_adam_cpu {
using namespace opf::cpu;

// Every tensor of list `name` (argument i) must have `dtype` and, when n is given, n[k] elements.
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

void call(const opf_call* c, bool execute) {
  const std::string_view entry = c->entry ? c->entry : "";
  if (entry != "step") failf("unknown entry '%.40s' (fused_adam has step)", c->entry ? c->entry : "");
  const Args args(c, 5, 8);
  const char* e = args.entry();
  const double inf = HUGE_VAL;
  const double lr = args.f64(0, "lr"), beta1 = args.f64(1, "beta1"), beta2 = args.f64(2, "beta2"),
               eps = args.f64(3, "eps"), wd = args.f64(5, "weight_decay");
  const int64_t step = args.i64(4, "step");
  const bool adamw = args.flag(6, "adam_w_mode"), bias_correction = args.flag(7, "bias_correction");
  check_param(e, "lr", lr, 0, false, inf, false);
  check_param(e, "beta1", beta1, 0, false, 1, true);
  check_param(e, "beta2", beta2, 0, false, 1, true);
  check_param(e, "eps", eps, 0, true, inf, false);
  check_param(e, "weight_decay", wd, 0, false, inf, false);
  if (step < 1) failf("%s: param step = %lld must be >= 1", e, (long long)step);

  const auto grads = args.list(0, "grads"), params = args.list(1, "params"), exp_avg = args.list(2, "exp_avg"),
             exp_avg_sq = args.list(3, "exp_avg_sq");
  const opf_tensor& flag = expect_arg(args, 4, "noop_flag", OPF_I32, {1});
  const int32_t dtype = grads.empty() ? OPF_F32 : grads[0].dtype;
  if (!grads.empty() && !is_float_storage(dtype))
    failf("%s: grads[0] has dtype %s, expected f32, f16 or bf16", e, dtype_str(dtype));
  for (size_t k = 0; k < grads.size(); ++k)
    if (numel(grads[k]) > 0 && !grads[k].data) failf("%s: grads[%zu] has no data", e, k);
  check_list(args, grads, "grads", grads, dtype);
  check_list(args, params, "params", grads, dtype);
  check_list(args, exp_avg, "exp_avg", grads, OPF_F32);
  check_list(args, exp_avg_sq, "exp_avg_sq", grads, OPF_F32);
  if (!execute) return;

  int32_t* noop = static_cast<int32_t*>(flag.data);
  if (*noop != 0 || grads.empty()) return;

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
  a.omb1 = float(1.0 - beta1);
  a.b2 = float(beta2);
  a.omb2 = float(1.0 - beta2);
  a.lr = float(lr);
  a.eps = float(eps);
  a.wd = float(wd);
  a.rbc1 = bias_correction ? float(1.0 / (1.0 - std::pow(beta1, double(step)))) : 1.0f;
  a.rbc2 = bias_correction ? float(1.0 / (1.0 - std::pow(beta2, double(step)))) : 1.0f;
  a.adamw = adamw;
  // chunks of OPF_TUNE_CHUNK elements per tensor; tasks of consecutive chunks, >= OPF_TUNE_CHUNK
  const int64_t chunk = OPF_TUNE_CHUNK;
  a.task_start.push_back(0);
  int64_t in_task = 0;
  for (int64_t k = 0; k < a.count; ++k) {
    const int64_t n = numel(grads[size_t(k)]);
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
  if (a.pieces.empty()) return;
  OPF_DISPATCH(RunStep)(a);
  if (a.nonfinite) *noop = 1;
}

}  // namespace opf::fused_adam_cpu

OPF_DEFINE_MODULE("fused_adam", "cpu", opf::fused_adam_cpu::isa(), opf::fused_adam_cpu::call)
OPF_HOST_CODE_END
#endif  // HWY_ONCE
