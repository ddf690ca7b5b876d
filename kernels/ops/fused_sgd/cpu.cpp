// fused_sgd — CPU module (contract: ref.cpp). Highway SIMD: prebuilt modules dispatch on the
// running CPU; the JIT builds only the host target.
// step_with_copy (apex's 4-list form): params are f32 masters and the new p is also stored,
// rounded to the grads' dtype, into model_copy, in the same pass.
// One pass over memory: each element's g, p and momentum are read once and p, momentum written
// back in place (at most 20 bytes per element for f32 params, 14 for f16/bf16; the buffer is
// only written on the first run and untouched without momentum). Work is cut the
// multi_tensor_apply way: every tensor into chunks of OPF_TUNE_CHUNK elements, and consecutive
// chunks, across tensors, grouped into tasks of at least OPF_TUNE_CHUNK elements, so that a list
// of many small tensors does not become one task each. Boundaries come from the sizes alone and
// the update is elementwise, so any thread count gives the same bits.
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

#ifndef OPF_FUSED_SGD_CPU_COMMON
#define OPF_FUSED_SGD_CPU_COMMON
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

namespace opf::fused_sgd_cpu {
// One contiguous run of elements of one tensor.
struct Piece {
  int32_t tensor;
  int64_t begin, end;
};
struct Step {
  const opf_host* host;
  int32_t dtype;
  const opf_tensor *g, *p, *b;      // the lists
  const opf_tensor* copy;           // step_with_copy: the model copy in T (params are f32); else null
  std::vector<Piece> pieces;        // in list order
  std::vector<int64_t> task_start;  // pieces of task t: [task_start[t], task_start[t + 1])
  float lr, mu, omd, wd, scale;
  bool nesterov, wd_after, first_run;
};
}  // namespace opf::fused_sgd_cpu
#endif  // OPF_FUSED_SGD_CPU_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/fused_sgd/cpu.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::fused_sgd_cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// The per-call factors as vectors, and which optional terms apply. The bools are loop-invariant
// branches (well predicted, and the loop is memory bound); only "is there a buffer" is a template
// parameter, since it decides which memory is touched.
struct Consts {
  VF lr, mu, omd, wd, scale;
  bool wd_before, wd_after, nesterov, first_run;
};

// One vector of elements: returns the new p; b (the buffer) is updated when kMomentum.
template <bool kMomentum>
HWY_INLINE VF Update(const Consts& c, VF g, VF p, VF& b) {
  g = hn::Mul(g, c.scale);
  if (c.wd_before) g = hn::MulAdd(c.wd, p, g);
  if constexpr (kMomentum) {
    b = c.first_run ? g : hn::MulAdd(c.mu, b, hn::Mul(c.omd, g));
    g = c.nesterov ? hn::MulAdd(c.mu, b, g) : b;
  }
  if (c.wd_after) g = hn::MulAdd(c.wd, p, g);
  return hn::NegMulAdd(c.lr, g, p);
}

// Elements [0, n) of one tensor's g, p, (with kMomentum) b, and (with a P = f32 master param and
// S = the grads' dtype) the model copy y = p rounded to S.
template <bool kMomentum, class S, class P>
void Run(const Consts& c, const S* HWY_RESTRICT g, P* HWY_RESTRICT p, float* HWY_RESTRICT b, S* HWY_RESTRICT y,
         size_t n) {
  const DF d;
  const size_t N = hn::Lanes(d);
  size_t j = 0;
  for (; j + N <= n; j += N) {
    VF bv = kMomentum && !c.first_run ? hn::LoadU(d, b + j) : hn::Zero(d);
    const VF pv = Update<kMomentum>(c, LoadWiden(d, g + j), LoadWiden(d, p + j), bv);
    StoreRound(d, pv, p + j);
    if constexpr (kMomentum) hn::StoreU(bv, d, b + j);
    if (y) StoreRound(d, pv, y + j);
  }
  if (j < n) {  // the same code on padded copies
    const size_t r = n - j;
    HWY_ALIGN S gb[hn::MaxLanes(d)] = {}, yb[hn::MaxLanes(d)] = {};
    HWY_ALIGN P pb[hn::MaxLanes(d)] = {};
    HWY_ALIGN float bb[hn::MaxLanes(d)] = {};
    std::memcpy(gb, g + j, r * sizeof(S));
    std::memcpy(pb, p + j, r * sizeof(P));
    if (kMomentum && !c.first_run) std::memcpy(bb, b + j, r * sizeof(float));
    VF bv = hn::Load(d, bb);
    const VF pv = Update<kMomentum>(c, LoadWiden(d, gb), LoadWiden(d, pb), bv);
    StoreRound(d, pv, pb);
    std::memcpy(p + j, pb, r * sizeof(P));
    if (y) {
      StoreRound(d, pv, yb);
      std::memcpy(y + j, yb, r * sizeof(S));
    }
    if constexpr (kMomentum) {
      hn::Store(bv, d, bb);
      std::memcpy(b + j, bb, r * sizeof(float));
    }
  }
}

template <bool kMomentum, class S>
void StepT(const Step& a) {
  const DF d;
  const Consts c{hn::Set(d, a.lr),        hn::Set(d, a.mu),    hn::Set(d, a.omd),
                 hn::Set(d, a.wd),        hn::Set(d, a.scale), a.wd != 0 && !a.wd_after,
                 a.wd != 0 && a.wd_after, a.nesterov,          a.first_run};
  const int64_t ntasks = int64_t(a.task_start.size()) - 1;
  opf::cpu::parallel_for(a.host, ntasks, [&](int64_t t) {
    for (int64_t k = a.task_start[size_t(t)]; k < a.task_start[size_t(t) + 1]; ++k) {
      const Piece& pc = a.pieces[size_t(k)];
      const size_t i = size_t(pc.tensor), o = size_t(pc.begin);
      float* b = kMomentum ? static_cast<float*>(a.b[i].data) + o : nullptr;
      const S* g = static_cast<const S*>(a.g[i].data) + o;
      const size_t n = size_t(pc.end - pc.begin);
      if (a.copy) {
        Run<kMomentum>(c, g, static_cast<float*>(a.p[i].data) + o, b, static_cast<S*>(a.copy[i].data) + o, n);
      } else {
        Run<kMomentum>(c, g, static_cast<S*>(a.p[i].data) + o, b, static_cast<S*>(nullptr), n);
      }
    }
  });
}

template <class S>
void StepMomentum(const Step& a) {
  if (a.mu != 0) {
    StepT<true, S>(a);
  } else {
    StepT<false, S>(a);
  }
}
void RunStep(const Step& a) {
  opf::cpu::run_storage<"step">(a.dtype, [&](auto s) { StepMomentum<decltype(s)>(a); });
}
void RunStepWithCopy(const Step& a) {
  opf::cpu::run_storage<"step_with_copy">(a.dtype, [&](auto s) { StepMomentum<decltype(s)>(a); });
}
const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace opf::fused_sgd_cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::fused_sgd_cpu {
OPF_KERNEL_EXPORT(RunStep);
OPF_KERNEL_EXPORT(RunStepWithCopy);
OPF_CPU_EXPORT_TARGET()
}  // namespace opf::fused_sgd_cpu
#endif  // HWY_ONCE

#if HWY_ONCE && OPF_HOST_PART  // the host code: not in a JIT kernels module (cpu/dispatch.h)
OPF_HOST_CODE_BEGIN
namespace opf::fused_sgd_cpu {
using namespace opf::cpu;

// Every tensor of list `name` must have `dtype` and as many elements as grads[k].
void check_list(const Args& args, TensorList list, const char* name, TensorList grads, int32_t dtype, const char* why) {
  const char* e = args.entry();
  if (list.size() != grads.size())
    failf("%s: list %s has %zu tensors, grads has %zu", e, name, list.size(), grads.size());
  for (size_t k = 0; k < list.size(); ++k) {
    const opf_tensor& t = list[k];
    if (t.dtype != dtype)
      failf("%s: %s[%zu] has dtype %s, expected %s (%s)", e, name, k, dtype_str(t.dtype), dtype_str(dtype), why);
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
  if (entry != "step" && entry != "step_with_copy")
    failf("unknown entry '%.40s' (fused_sgd has step, step_with_copy)", c->entry ? c->entry : "");
  // step_with_copy: f32 master params and a model_copy list (argument 3) in the grads' dtype
  const bool with_copy = entry == "step_with_copy";
  const Args args(c, with_copy ? 5 : 4, 8);
  const char* e = args.entry();
  const double inf = HUGE_VAL;
  const double lr = args.f64(0, "lr"), momentum = args.f64(1, "momentum"), dampening = args.f64(2, "dampening");
  const bool nesterov = args.flag(3, "nesterov");
  const double wd = args.f64(4, "weight_decay");
  const bool wd_after = args.flag(5, "wd_after_momentum"), first_run = args.flag(6, "first_run");
  const double scale = args.f64(7, "scale");
  check_param(e, "lr", lr, 0, false, inf, false);
  check_param(e, "momentum", momentum, 0, false, inf, false);
  check_param(e, "dampening", dampening, 0, false, 1, false);
  check_param(e, "weight_decay", wd, 0, false, inf, false);
  check_param(e, "scale", scale, 0, true, inf, true);

  const auto grads = args.list(0, "grads"), params = args.list(1, "params"), bufs = args.list(2, "momentum_buffer");
  const auto copies = with_copy ? args.list(3, "model_copy") : TensorList();
  const opf_tensor& flag = expect_arg(args, with_copy ? 4 : 3, "noop_flag", OPF_I32, {1});
  const int32_t dtype = grads.empty() ? OPF_F32 : grads[0].dtype;
  if (!grads.empty() && !is_float_storage(dtype))
    failf("%s: grads[0] has dtype %s, expected f32, f16 or bf16", e, dtype_str(dtype));
  check_list(args, grads, "grads", grads, dtype, "the dtype of grads[0]");
  if (with_copy) {
    check_list(args, params, "params", grads, OPF_F32, "step_with_copy keeps f32 master params");
    check_list(args, copies, "model_copy", grads, dtype, "the dtype of grads");
  } else {
    check_list(args, params, "params", grads, dtype, "the dtype of grads");
  }
  check_list(args, bufs, "momentum_buffer", grads, OPF_F32, "optimizer states are f32");
  if (!execute) return;

  const int32_t* noop = static_cast<const int32_t*>(flag.data);
  if (*noop != 0 || grads.empty()) return;

  Step a{};
  a.host = c->host;
  a.dtype = dtype;
  a.g = grads.data();
  a.p = params.data();
  a.b = bufs.data();
  a.copy = with_copy ? copies.data() : nullptr;
  // f32 factors from double host arithmetic (ref.cpp's contract)
  a.lr = float(lr);
  a.mu = float(momentum);
  a.omd = float(1.0 - dampening);
  a.wd = float(wd);
  a.scale = float(scale);
  a.nesterov = nesterov;
  a.wd_after = wd_after;
  a.first_run = first_run;
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
  if (a.pieces.empty()) return;
  if (with_copy) {
    OPF_DISPATCH(RunStepWithCopy)(a);
  } else {
    OPF_DISPATCH(RunStep)(a);
  }
}

}  // namespace opf::fused_sgd_cpu

OPF_DEFINE_MODULE("fused_sgd", "cpu", opf::fused_sgd_cpu::isa(), opf::fused_sgd_cpu::call)
OPF_HOST_CODE_END
#endif  // HWY_ONCE
