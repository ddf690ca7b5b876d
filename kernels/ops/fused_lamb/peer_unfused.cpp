// LAMB as PyTorch eager runs it (torch has no LAMB; this is the common eager recipe, e.g. timm's
// Lamb with apex's options), the unfused peer of fused_lamb: one full pass over the lists per
// tensor op, in the order the Python issues them:
//   G = norm(stack([g.norm() for g]));  clip = G/max_grad_norm if G > max_grad_norm else 1
//   g = g.float().div_(clip)                           (one pass here, into an f32 list)
//   L2 mode with wd != 0: g = g.add(p, alpha=wd)       (a new f32 list)
//   m.mul_(beta1).add_(g, alpha=beta3);  v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
//   d = v.sqrt() / sqrt(bc2);  d.add_(eps);  u = m / bc1;  u.div_(d)
//   decoupled mode with wd != 0: u.add_(p, alpha=wd)
//   wd != 0 or nvlamb: ratio = p.norm() / u.norm() (1 when either is 0);  u.mul_(ratio)
//   p.add_(u, alpha=-lr)
// with bc = 1 - beta^step (1 with bias_correction off). f32 math, each pass rounding its output to
// its tensor's dtype (p in T; m, v and the temporaries g, d, u in f32); norms accumulate in f32
// and the scalars (norms, clip, ratio) stay f32 (torch would return a 16-bit tensor's norm in
// 16 bits: a rounding that changes no pass, left out). Temporaries are allocated once (PyTorch's
// caching allocator reuses them). Threads: each pass splits the lists' concatenated elements
// statically into `threads` slices (opf::host_threads + parallel_for), one barrier per pass —
// kinder to the peer than PyTorch's CPU foreach fallback. SIMD through Highway (dynamic dispatch).
// The clipped gradient is f32 for 16-bit grads too (as an eager optimizer keeping f32 state
// does): a clip in place in 16 bits would put a 16-bit rounding into the moments and the update
// that the f32 contract does not have, and the peer is checked against that contract. For f32
// that pass is torch's in-place div_; for 16-bit it costs the peer 2 more bytes written per
// element and 2 more read by each of the two moment passes (~5 % of its traffic). Outputs
// reported: params, exp_avg, exp_avg_sq; the peer rounds the update to T as the contract stores it
// (one more pass for 16-bit T) but does not report grads, and has no flag.
#ifndef OPF_FUSED_LAMB_PEER_COMMON
#define OPF_FUSED_LAMB_PEER_COMMON
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
#include "opforge/dtype.h"
#include "opforge/threads.h"
#include "peers/peer.h"

namespace opf::suites::peers::fused_lamb_unfused {
// S: the storage dtype T; F: f32.
enum class Op {
  sumsq_s,      // return sum y*y                y: S
  sumsq_f,      // return sum y*y                y: F
  div_new_fs,   // x = y / s                     x: F, y: S
  add_new_ffs,  // x = y + s * z                 x, y: F, z: S
  mul_f,        // x = x * s                     x: F
  axpy_fs,      // x = x + s * y                 x: F, y: S
  axpy_ff,      // x = x + s * y                 x, y: F
  addcmul_ff,   // x = x + s * y * y             x, y: F
  sqrt_div_f,   // x = sqrt(y) / s               x, y: F  (two passes in torch, see run())
  div_new_f,    // x = y / s                     x, y: F
  add_f,        // x = x + s                     x: F
  div_ff,       // x = x / y                     x, y: F
  axpy_sf,      // x = x + s * y                 x: S, y: F
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
}  // namespace opf::suites::peers::fused_lamb_unfused
#endif  // OPF_FUSED_LAMB_PEER_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/fused_lamb/peer_unfused.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::suites::peers::fused_lamb_unfused::HWY_NAMESPACE {
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

template <class D, class Y>
HWY_INLINE float SumSq(D d, const Y* HWY_RESTRICT y, size_t n) {
  const size_t N = hn::Lanes(d);
  auto acc = hn::Zero(d);
  size_t j = 0;
  for (; j + N <= n; j += N) {
    const auto v = LoadWiden(d, y + j);
    acc = hn::MulAdd(v, v, acc);
  }
  float s = SumLanes(d, acc);
  for (; j < n; ++j) s += to_f32(y[j]) * to_f32(y[j]);
  return s;
}

template <class S>
float PassT(const Pass& a) {
  const hn::ScalableTag<float> d;
  const auto vs = hn::Set(d, a.s);
  const float s = a.s;
  switch (a.op) {
    case Op::sumsq_s: return SumSq(d, static_cast<const S*>(a.y), a.n);
    case Op::sumsq_f: return SumSq(d, static_cast<const float*>(a.y), a.n);
    case Op::div_new_fs: {
      float* x = static_cast<float*>(a.x);
      const S* y = static_cast<const S*>(a.y);
      Map(
          d, x, a.n, [&](size_t j) { return hn::Div(LoadWiden(d, y + j), vs); },
          [&](size_t j) { return to_f32(y[j]) / s; });
      break;
    }
    case Op::add_new_ffs: {
      float* x = static_cast<float*>(a.x);
      const float* y = static_cast<const float*>(a.y);
      const S* z = static_cast<const S*>(a.z);
      Map(
          d, x, a.n, [&](size_t j) { return hn::MulAdd(vs, LoadWiden(d, z + j), hn::LoadU(d, y + j)); },
          [&](size_t j) { return std::fma(s, to_f32(z[j]), y[j]); });
      break;
    }
    case Op::mul_f: {
      float* x = static_cast<float*>(a.x);
      Map(
          d, x, a.n, [&](size_t j) { return hn::Mul(hn::LoadU(d, x + j), vs); }, [&](size_t j) { return x[j] * s; });
      break;
    }
    case Op::axpy_fs: {
      float* x = static_cast<float*>(a.x);
      const S* y = static_cast<const S*>(a.y);
      Map(
          d, x, a.n, [&](size_t j) { return hn::MulAdd(vs, LoadWiden(d, y + j), hn::LoadU(d, x + j)); },
          [&](size_t j) { return std::fma(s, to_f32(y[j]), x[j]); });
      break;
    }
    case Op::axpy_ff: {
      float* x = static_cast<float*>(a.x);
      const float* y = static_cast<const float*>(a.y);
      Map(
          d, x, a.n, [&](size_t j) { return hn::MulAdd(vs, hn::LoadU(d, y + j), hn::LoadU(d, x + j)); },
          [&](size_t j) { return std::fma(s, y[j], x[j]); });
      break;
    }
    case Op::addcmul_ff: {
      float* x = static_cast<float*>(a.x);
      const float* y = static_cast<const float*>(a.y);
      Map(
          d, x, a.n,
          [&](size_t j) {
            const auto g = LoadWiden(d, y + j);
            return hn::MulAdd(hn::Mul(vs, g), g, hn::LoadU(d, x + j));
          },
          [&](size_t j) { return std::fma(s * to_f32(y[j]), to_f32(y[j]), x[j]); });
      break;
    }
    case Op::sqrt_div_f: {
      float* x = static_cast<float*>(a.x);
      const float* y = static_cast<const float*>(a.y);
      Map(
          d, x, a.n, [&](size_t j) { return hn::Sqrt(hn::LoadU(d, y + j)); },
          [&](size_t j) { return std::sqrt(y[j]); });
      Map(
          d, x, a.n, [&](size_t j) { return hn::Div(hn::LoadU(d, x + j), vs); }, [&](size_t j) { return x[j] / s; });
      break;
    }
    case Op::div_new_f: {
      float* x = static_cast<float*>(a.x);
      const float* y = static_cast<const float*>(a.y);
      Map(
          d, x, a.n, [&](size_t j) { return hn::Div(hn::LoadU(d, y + j), vs); }, [&](size_t j) { return y[j] / s; });
      break;
    }
    case Op::add_f: {
      float* x = static_cast<float*>(a.x);
      Map(
          d, x, a.n, [&](size_t j) { return hn::Add(hn::LoadU(d, x + j), vs); }, [&](size_t j) { return x[j] + s; });
      break;
    }
    case Op::div_ff: {
      float* x = static_cast<float*>(a.x);
      const float* y = static_cast<const float*>(a.y);
      Map(
          d, x, a.n, [&](size_t j) { return hn::Div(hn::LoadU(d, x + j), hn::LoadU(d, y + j)); },
          [&](size_t j) { return x[j] / y[j]; });
      break;
    }
    case Op::axpy_sf: {
      S* x = static_cast<S*>(a.x);
      const float* y = static_cast<const float*>(a.y);
      Map(
          d, x, a.n, [&](size_t j) { return hn::MulAdd(vs, hn::LoadU(d, y + j), LoadWiden(d, x + j)); },
          [&](size_t j) { return std::fma(s, y[j], to_f32(x[j])); });
      break;
    }
  }
  return 0;
}

float RunPass(const Pass& a) {
  float r = 0;
  opf::cpu::with_storage(a.dtype, [&](auto s) { r = PassT<decltype(s)>(a); });
  return r;
}

}  // namespace opf::suites::peers::fused_lamb_unfused::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::suites::peers {
namespace fused_lamb_unfused {
HWY_EXPORT(RunPass);

std::string unsupported(const PeerCase& c) {
  if (c.shape.size() != 2) return "fused_lamb shapes are [list_length, max_numel]";
  if (c.entry != "step") return "fused_lamb has one entry, step";
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
    const bool l2 = params_.get("weight_decay") != 0 && !params_.flag("adam_w_mode");
    for (size_t k = 0; k < g.size(); ++k) {
      const int64_t n = g[k]->desc->numel();
      offsets_.push_back(offsets_.back() + n);
      g_.push_back(g[k]->bytes);
      p_.push_back(p[k]->bytes);
      m_.push_back(as_f32(*m[k]));
      v_.push_back(as_f32(*v[k]));
      d_.emplace_back(size_t(n));
      u_.emplace_back(size_t(n));
      gc_.emplace_back(size_t(n));
      if (l2) gd_.emplace_back(size_t(n));
    }
  }

  void run() override {
    const double lr = params_.get("lr"), beta1 = params_.get("beta1"), beta2 = params_.get("beta2"),
                 eps = params_.get("eps"), wd = params_.get("weight_decay"), t = double(params_.get_int("step")),
                 mgn = params_.get("max_grad_norm");
    const bool bc = params_.flag("bias_correction"), adamw = params_.flag("adam_w_mode");
    const float beta3 = params_.flag("grad_averaging") ? float(1 - beta1) : 1.0f;
    const int32_t T = int32_t(dt_);
    const size_t count = g_.size();
    // global grad norm from per-tensor norms, each returned in T
    const std::vector<double> gsq = norms_sq(Op::sumsq_s, T, [&](size_t k) { return g_[k].data(); });
    double G2 = 0;
    for (double s : gsq) {
      const float nk = float(std::sqrt(s));
      G2 += double(nk) * double(nk);
    }
    const float G = float(std::sqrt(G2));
    const float clip = G > float(mgn) ? G / float(mgn) : 1.0f;
    pass(Op::div_new_fs, T, [&](size_t k) { return Ptrs{gc_[k].data(), g_[k].data(), nullptr, clip}; });
    const bool l2 = wd != 0 && !adamw;
    if (l2)
      pass(Op::add_new_ffs, T, [&](size_t k) { return Ptrs{gd_[k].data(), gc_[k].data(), p_[k].data(), float(wd)}; });
    auto& grads = l2 ? gd_ : gc_;
    pass(Op::mul_f, T, [&](size_t k) { return Ptrs{m_[k].data(), nullptr, nullptr, float(beta1)}; });
    pass(Op::axpy_ff, T, [&](size_t k) { return Ptrs{m_[k].data(), grads[k].data(), nullptr, beta3}; });
    pass(Op::mul_f, T, [&](size_t k) { return Ptrs{v_[k].data(), nullptr, nullptr, float(beta2)}; });
    pass(Op::addcmul_ff, T, [&](size_t k) { return Ptrs{v_[k].data(), grads[k].data(), nullptr, float(1 - beta2)}; });
    const double bc1 = bc ? 1 - std::pow(beta1, t) : 1.0, bc2 = bc ? 1 - std::pow(beta2, t) : 1.0;
    pass(Op::sqrt_div_f, T, [&](size_t k) { return Ptrs{d_[k].data(), v_[k].data(), nullptr, float(std::sqrt(bc2))}; });
    pass(Op::add_f, T, [&](size_t k) { return Ptrs{d_[k].data(), nullptr, nullptr, float(eps)}; });
    pass(Op::div_new_f, T, [&](size_t k) { return Ptrs{u_[k].data(), m_[k].data(), nullptr, float(bc1)}; });
    pass(Op::div_ff, T, [&](size_t k) { return Ptrs{u_[k].data(), d_[k].data()}; });
    if (wd != 0 && adamw)
      pass(Op::axpy_fs, T, [&](size_t k) { return Ptrs{u_[k].data(), p_[k].data(), nullptr, float(wd)}; });
    // The contract's u is the one stored into grads, in T (eager: grads.copy_(u)): the norm and the
    // update use it rounded. Left in f32, a param the update cancels to ~1e-3 of itself misses the
    // bf16 tolerance (1 seed in 30).
    if (dt_ != opf::DType::f32)
      opf::cpu::with_storage(int32_t(dt_), [&](auto tag) {
        using S = decltype(tag);
        for (auto& u : u_)
          for (float& x : u) x = opf::cpu::to_f32(opf::cpu::from_f32<S>(x));
      });
    if (wd != 0 || params_.flag("use_nvlamb")) {
      const std::vector<double> psq = norms_sq(Op::sumsq_s, T, [&](size_t k) { return p_[k].data(); });
      const std::vector<double> usq = norms_sq(Op::sumsq_f, T, [&](size_t k) { return u_[k].data(); });
      std::vector<float> ratio(count, 1.0f);
      for (size_t k = 0; k < count; ++k) {
        const float pn = float(std::sqrt(psq[k])), un = float(std::sqrt(usq[k]));
        if (pn > 0 && un > 0) ratio[k] = pn / un;
      }
      pass(Op::mul_f, T, [&](size_t k) { return Ptrs{u_[k].data(), nullptr, nullptr, ratio[k]}; });
    }
    pass(Op::axpy_sf, T, [&](size_t k) { return Ptrs{p_[k].data(), u_[k].data(), nullptr, float(-lr)}; });
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
    float s = 0;
  };

  static std::vector<float> as_f32(const HostArg& h) {
    std::vector<float> v(size_t(h.desc->numel()));
    std::memcpy(v.data(), h.bytes.data(), v.size() * sizeof(float));
    return v;
  }

  // Which pointers of an op hold S (the rest hold f32).
  static void storage_of(Op op, bool& x, bool& y, bool& z) {
    x = op == Op::axpy_sf;
    y = op == Op::sumsq_s || op == Op::div_new_fs || op == Op::axpy_fs;
    z = op == Op::add_new_ffs;
  }

  // One full pass over the lists: thread t takes elements [N t / threads, N (t+1) / threads) of
  // the concatenated lists; f(slice, tensor, result) gets each piece's return value.
  template <class P, class R>
  void run_slices(Op op, int32_t dtype, P&& ptrs, R&& result) {
    const int64_t total = offsets_.back();
    const size_t e = dtype == OPF_F32 ? 4 : 2;
    bool xs, ys, zs;
    storage_of(op, xs, ys, zs);
    const int slices = std::max(threads_, 1);
    opf::cpu::parallel_for(host_, slices, [&](int64_t t) {
      const int64_t lo = total * t / slices, hi = total * (t + 1) / slices;
      size_t k = size_t(std::upper_bound(offsets_.begin(), offsets_.end(), lo) - offsets_.begin()) - 1;
      for (; k + 1 < offsets_.size() && offsets_[k] < hi; ++k) {
        const int64_t b = std::max(lo, offsets_[k]) - offsets_[k], end = std::min(hi, offsets_[k + 1]) - offsets_[k];
        if (end <= b) continue;
        const Ptrs q = ptrs(k);
        auto at = [&](const void* p, bool storage) {
          return p ? static_cast<const std::byte*>(p) + size_t(b) * (storage ? e : 4) : nullptr;
        };
        Pass a{op, dtype, const_cast<std::byte*>(at(q.x, xs)), at(q.y, ys), at(q.z, zs), size_t(end - b), q.s};
        result(size_t(t), k, HWY_DYNAMIC_DISPATCH(RunPass)(a));
      }
    });
  }

  template <class P>
  void pass(Op op, int32_t dtype, P&& ptrs) {
    run_slices(op, dtype, ptrs, [](size_t, size_t, float) {});
  }

  // Per tensor, the sum of squares of the list `data(k)` points to (f32 partials per slice).
  template <class P>
  std::vector<double> norms_sq(Op op, int32_t dtype, P&& data) {
    const size_t count = offsets_.size() - 1, slices = size_t(std::max(threads_, 1));
    std::vector<float> part(slices * count, 0.0f);
    run_slices(
        op, dtype,
        [&](size_t k) {
          return Ptrs{nullptr, data(k)};
        },
        [&](size_t t, size_t k, float r) { part[t * count + k] = r; });
    std::vector<double> s(count, 0.0);
    for (size_t t = 0; t < slices; ++t)
      for (size_t k = 0; k < count; ++k) s[k] += double(part[t * count + k]);
    return s;
  }

  DType dt_;
  const opf_host* host_;
  int threads_;
  Params params_;
  std::vector<int64_t> offsets_;
  std::vector<std::vector<std::byte>> g_, p_;
  std::vector<std::vector<float>> gc_, gd_, m_, v_, d_, u_;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

}  // namespace fused_lamb_unfused

OPF_PEER_ADAPTER(unfused_fused_lamb, "unfused", "fused_lamb", fused_lamb_unfused::unsupported,
                 fused_lamb_unfused::make);

}  // namespace opf::suites::peers
#endif  // HWY_ONCE
