// PyTorch eager's foreach Adam/AdamW (torch.optim.Adam/AdamW, foreach=True, not capturable) as the
// unfused peer of fused_adam: one full pass over the lists per elementwise op, as
// torch/optim/adam.py's _multi_tensor_adam issues them:
//   weight_decay != 0:  AdamW  p.mul_(1 - lr*wd)              L2  g = g + wd*p (a new list in T)
//   m.lerp_(g, 1 - beta1);  v.mul_(beta2);  v.addcmul_(g, g, 1 - beta2)
//   d = v.sqrt() (a temporary list);  d.div_(sqrt(bc2));  d.add_(eps)
//   p.addcdiv_(m, d, -lr/bc1)
// with bc = 1 - beta^step (1 with bias_correction off). f32 math, each pass rounding its output to
// its tensor's dtype (params in T, states and the temporary in f32), scalars in f32 as PyTorch's
// opmath. The temporary lists are allocated once (PyTorch's caching allocator reuses them).
// Threads: each pass splits the lists' concatenated elements statically into `threads` slices
// (opf::host_threads + parallel_for), one barrier per pass. That is kinder to the peer than
// PyTorch's CPU foreach fallback, which runs tensor by tensor and keeps tensors below its 32 Ki
// grain on one thread. SIMD through Highway (dynamic dispatch), like ATen's vectorized kernels.
// PyTorch has no noop flag in this path: the peer reports params, exp_avg and exp_avg_sq only.
#ifndef OPF_FUSED_ADAM_PEER_COMMON
#define OPF_FUSED_ADAM_PEER_COMMON
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cpu/parallel.h"
#include "cpu/storage.h"
#include "opforge/threads.h"
#include "peers/peer.h"

namespace opf::suites::peers::fused_adam_unfused {
enum class Op {
  mul,      // x = x * s                  x: S
  add_new,  // x = y + s * z              x, y, z: S
  lerp,     // x = lerp(x, y, s)          x: f32, y: S
  addcmul,  // x = x + s * y * y          x: f32, y: S
  sqrt,     // x = sqrt(y)                x, y: f32
  div,      // x = x / s                  x: f32
  add,      // x = x + s                  x: f32
  addcdiv,  // x = x + s * y / z          x: S, y, z: f32
};
struct Pass {
  Op op;
  int32_t dtype;  // S
  void* x;
  const void* y;
  const void* z;
  size_t n;
  float s;
};
}  // namespace opf::suites::peers::fused_adam_unfused
#endif  // OPF_FUSED_ADAM_PEER_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/fused_adam/peer_unfused.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::suites::peers::fused_adam_unfused::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;
using opf::cpu::from_f32;
using opf::cpu::to_f32;

// x[j] = f(j) for j in [0, n): vec for whole vectors, one for the tail
template <class D, class X, class VecF, class OneF>
HWY_INLINE void Map(D d, X* HWY_RESTRICT x, size_t n, VecF&& vec, OneF&& one) {
  const size_t N = hn::Lanes(d);
  size_t j = 0;
  for (; j + N <= n; j += N) StoreRound(d, vec(j), x + j);
  for (; j < n; ++j) x[j] = from_f32<X>(one(j));
}

template <class S>
void PassT(const Pass& a) {
  const hn::ScalableTag<float> d;
  const auto vs = hn::Set(d, a.s);
  const float s = a.s;
  switch (a.op) {
    case Op::mul: {
      S* x = static_cast<S*>(a.x);
      Map(
          d, x, a.n, [&](size_t j) { return hn::Mul(LoadWiden(d, x + j), vs); },
          [&](size_t j) { return to_f32(x[j]) * s; });
      return;
    }
    case Op::add_new: {
      S* x = static_cast<S*>(a.x);
      const S *y = static_cast<const S*>(a.y), *z = static_cast<const S*>(a.z);
      Map(
          d, x, a.n, [&](size_t j) { return hn::MulAdd(vs, LoadWiden(d, z + j), LoadWiden(d, y + j)); },
          [&](size_t j) { return std::fma(s, to_f32(z[j]), to_f32(y[j])); });
      return;
    }
    case Op::lerp: {  // ATen's lerp: self + w*(end - self) for w < 0.5, else end - (end - self)*(1 - w)
      float* x = static_cast<float*>(a.x);
      const S* y = static_cast<const S*>(a.y);
      const bool small = std::fabs(s) < 0.5f;
      const auto vw1 = hn::Set(d, 1.0f - s);
      Map(
          d, x, a.n,
          [&](size_t j) {
            const auto self = hn::LoadU(d, x + j), end = LoadWiden(d, y + j), diff = hn::Sub(end, self);
            return small ? hn::MulAdd(vs, diff, self) : hn::NegMulAdd(diff, vw1, end);
          },
          [&](size_t j) {
            const float self = x[j], end = to_f32(y[j]);
            return small ? std::fma(s, end - self, self) : std::fma(-(end - self), 1.0f - s, end);
          });
      return;
    }
    case Op::addcmul: {
      float* x = static_cast<float*>(a.x);
      const S* y = static_cast<const S*>(a.y);
      Map(
          d, x, a.n,
          [&](size_t j) {
            const auto g = LoadWiden(d, y + j);
            return hn::MulAdd(hn::Mul(vs, g), g, hn::LoadU(d, x + j));
          },
          [&](size_t j) { return std::fma(s * to_f32(y[j]), to_f32(y[j]), x[j]); });
      return;
    }
    case Op::sqrt: {
      float* x = static_cast<float*>(a.x);
      const float* y = static_cast<const float*>(a.y);
      Map(
          d, x, a.n, [&](size_t j) { return hn::Sqrt(hn::LoadU(d, y + j)); },
          [&](size_t j) { return std::sqrt(y[j]); });
      return;
    }
    case Op::div: {
      float* x = static_cast<float*>(a.x);
      Map(
          d, x, a.n, [&](size_t j) { return hn::Div(hn::LoadU(d, x + j), vs); }, [&](size_t j) { return x[j] / s; });
      return;
    }
    case Op::add: {
      float* x = static_cast<float*>(a.x);
      Map(
          d, x, a.n, [&](size_t j) { return hn::Add(hn::LoadU(d, x + j), vs); }, [&](size_t j) { return x[j] + s; });
      return;
    }
    case Op::addcdiv: {
      S* x = static_cast<S*>(a.x);
      const float *y = static_cast<const float*>(a.y), *z = static_cast<const float*>(a.z);
      Map(
          d, x, a.n,
          [&](size_t j) {
            return hn::MulAdd(vs, hn::Div(hn::LoadU(d, y + j), hn::LoadU(d, z + j)), LoadWiden(d, x + j));
          },
          [&](size_t j) { return std::fma(s, y[j] / z[j], to_f32(x[j])); });
      return;
    }
  }
}

void RunPass(const Pass& a) {
  opf::cpu::with_storage(a.dtype, [&](auto s) { PassT<decltype(s)>(a); });
}

}  // namespace opf::suites::peers::fused_adam_unfused::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::suites::peers {
namespace fused_adam_unfused {
HWY_EXPORT(RunPass);

std::string unsupported(const PeerCase& c) {
  if (c.shape.size() != 2) return "fused_adam shapes are [list_length, max_numel]";
  if (c.entry != "step") return "fused_adam has one entry, step";
  return {};
}

class Run final : public PeerRun {
 public:
  Run(const PeerCase& c, const DrawnCase& drawn)
      : dt_(c.dtype), host_(host_threads(c.threads)), threads_(c.threads), params_(c.params) {
    const auto elems = [&](std::string_view name) {
      std::vector<const HostArg*> v;
      for (const HostArg& h : drawn.host)
        if (h.desc->name == name) v.push_back(&h);
      return v;
    };
    const auto g = elems("grads"), p = elems("params"), m = elems("exp_avg"), v = elems("exp_avg_sq");
    offsets_.push_back(0);
    for (size_t k = 0; k < g.size(); ++k) {
      const int64_t n = g[k]->desc->numel();
      offsets_.push_back(offsets_.back() + n);
      g_.push_back(g[k]->bytes);
      p_.push_back(p[k]->bytes);
      m_.push_back(as_f32(*m[k]));
      v_.push_back(as_f32(*v[k]));
      d_.emplace_back(size_t(n));
      if (params_.get("weight_decay") != 0 && !params_.flag("adam_w_mode")) gd_.emplace_back(g_.back().size());
    }
  }

  void run() override {
    const double lr = params_.get("lr"), beta1 = params_.get("beta1"), beta2 = params_.get("beta2"),
                 eps = params_.get("eps"), wd = params_.get("weight_decay"), t = double(params_.get_int("step"));
    const bool bc = params_.flag("bias_correction");
    const int32_t T = int32_t(dt_);
    auto& grads = (wd != 0 && !params_.flag("adam_w_mode")) ? gd_ : g_;
    if (wd != 0) {
      if (params_.flag("adam_w_mode")) {
        pass(Op::mul, T, float(1 - lr * wd), [&](size_t k) { return Ptrs{p_[k].data()}; });
      } else {
        pass(Op::add_new, T, float(wd), [&](size_t k) { return Ptrs{gd_[k].data(), g_[k].data(), p_[k].data()}; });
      }
    }
    pass(Op::lerp, T, float(1 - beta1), [&](size_t k) { return Ptrs{m_[k].data(), grads[k].data()}; });
    pass(Op::mul, OPF_F32, float(beta2), [&](size_t k) { return Ptrs{v_[k].data()}; });
    pass(Op::addcmul, T, float(1 - beta2), [&](size_t k) { return Ptrs{v_[k].data(), grads[k].data()}; });
    const double bc1 = bc ? 1 - std::pow(beta1, t) : 1.0, bc2 = bc ? 1 - std::pow(beta2, t) : 1.0;
    pass(Op::sqrt, OPF_F32, 0, [&](size_t k) { return Ptrs{d_[k].data(), v_[k].data()}; });
    pass(Op::div, OPF_F32, float(std::sqrt(bc2)), [&](size_t k) { return Ptrs{d_[k].data()}; });
    pass(Op::add, OPF_F32, float(eps), [&](size_t k) { return Ptrs{d_[k].data()}; });
    pass(Op::addcdiv, T, float(-lr / bc1), [&](size_t k) { return Ptrs{p_[k].data(), m_[k].data(), d_[k].data()}; });
  }

  bool output(std::string_view, std::vector<double>&) const override { return false; }  // no noop flag

  bool output(std::string_view name, int k, std::vector<double>& out) const override {
    if (k < 0 || size_t(k) + 1 >= offsets_.size()) return false;
    const size_t n = size_t(offsets_[size_t(k) + 1] - offsets_[size_t(k)]);
    out.resize(n);
    if (name == "params") {
      for (size_t i = 0; i < n; ++i) out[i] = load_element(dt_, p_[size_t(k)].data(), int64_t(i));
    } else if (name == "exp_avg" || name == "exp_avg_sq") {
      const auto& src = name == "exp_avg" ? m_[size_t(k)] : v_[size_t(k)];
      for (size_t i = 0; i < n; ++i) out[i] = src[i];
    } else {
      return false;
    }
    return true;
  }

 private:
  struct Ptrs {
    void* x;
    const void* y = nullptr;
    const void* z = nullptr;
  };

  static std::vector<float> as_f32(const HostArg& h) {
    std::vector<float> v(size_t(h.desc->numel()));
    std::memcpy(v.data(), h.bytes.data(), v.size() * sizeof(float));
    return v;
  }

  // One full pass over the lists: thread t takes elements [N t / threads, N (t+1) / threads) of
  // the concatenated lists.
  template <class F>
  void pass(Op op, int32_t dtype, float s, F&& ptrs) {
    const int64_t total = offsets_.back();
    const size_t e = dtype == OPF_F32 ? 4 : 2, e_state = 4;
    const int slices = std::max(threads_, 1);
    opf::cpu::parallel_for(host_, slices, [&](int64_t t) {
      const int64_t lo = total * t / slices, hi = total * (t + 1) / slices;
      size_t k = size_t(std::upper_bound(offsets_.begin(), offsets_.end(), lo) - offsets_.begin()) - 1;
      for (; k + 1 < offsets_.size() && offsets_[k] < hi; ++k) {
        const int64_t b = std::max(lo, offsets_[k]) - offsets_[k], end = std::min(hi, offsets_[k + 1]) - offsets_[k];
        if (end <= b) continue;
        const Ptrs q = ptrs(k);
        // offset each pointer by its own element size: S for x (mul, add_new, addcdiv) and for
        // y, z of add_new; f32 otherwise
        const bool x_s = op == Op::mul || op == Op::add_new || op == Op::addcdiv;
        const bool y_s = op == Op::add_new || op == Op::lerp || op == Op::addcmul;
        const bool z_s = op == Op::add_new;
        auto at = [&](const void* p, bool storage) {
          return p ? static_cast<const std::byte*>(p) + size_t(b) * (storage ? e : e_state) : nullptr;
        };
        Pass a{op, dtype, const_cast<std::byte*>(at(q.x, x_s)), at(q.y, y_s), at(q.z, z_s), size_t(end - b), s};
        HWY_DYNAMIC_DISPATCH(RunPass)(a);
      }
    });
  }

  DType dt_;
  const opf_host* host_;
  int threads_;
  Params params_;
  std::vector<int64_t> offsets_;
  std::vector<std::vector<std::byte>> g_, p_, gd_;
  std::vector<std::vector<float>> m_, v_, d_;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

}  // namespace fused_adam_unfused

OPF_PEER_ADAPTER(unfused_fused_adam, "unfused", "fused_adam", fused_adam_unfused::unsupported,
                 fused_adam_unfused::make);

}  // namespace opf::suites::peers
#endif  // HWY_ONCE
