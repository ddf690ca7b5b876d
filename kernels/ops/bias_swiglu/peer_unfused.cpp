// bias_swiglu's `unfused` peer: what PyTorch eager runs for
//   t = x + bias; a, c = t.chunk(2, -1); y = F.silu(a) * c        (and its autograd backward)
// one whole-tensor pass at a time, each pass vectorised; intermediates in f32 (so that the peer
// is judged with our tolerance; eager's 16-bit intermediates would move fewer bytes but round at
// every step), the result rounded to T:
//   forward:  t = x + bias [N, 2H]; s = silu(t[:, :H]) [N, H]; y = s * t[:, H:] (T).
//   backward: from what eager saved (t and s, computed at setup, untimed):
//             dc = dy * s; ds = dy * t[:, H:]; da = ds * silu'(t[:, :H]);
//             dx = cat(da, dc) (T); dbias = dx.sum(0) (a column reduction reading dx back; here
//             from the f32 da, dc, see ColumnSum).
// sigmoid with exp-inl.h's ExpClamped, so that a ratio measures the fusion, not the exp.
// Threads: the PeerCase's count; rows (columns for the sum) split statically, one block per thread.
#ifndef OPF_SWIGLU_PEER_UNFUSED_COMMON
#define OPF_SWIGLU_PEER_UNFUSED_COMMON
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/parallel.h"
#include "cpu/storage.h"
#include "opforge/threads.h"
#include "peers/peer.h"

namespace opf::suites::peers::swiglu_unfused {
// One pass over rows [r0, r1) (columns [r0, r1) for ColumnSum) of an [N, 2H] / [N, H] problem.
struct Pass {
  int32_t dtype;
  int64_t r0, r1, n, h;
  const void* x;      // [N, 2H] T
  const float* bias;  // [2H]
  const void* dy;     // [N, H] T
  float* t;           // [N, 2H] x + bias
  float* s;           // [N, H] silu(a)
  float* dc;          // [N, H]
  float* ds;          // [N, H]
  float* da;          // [N, H]
  void* out;          // y [N, H] or dx [N, 2H], T
  float* dbias;       // [2H]
};
}  // namespace opf::suites::peers::swiglu_unfused
#endif  // OPF_SWIGLU_PEER_UNFUSED_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/bias_swiglu/peer_unfused.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/simd-inl.h"
#include "cpu/exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::suites::peers::swiglu_unfused::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;
using opf::cpu::from_f32;
using opf::cpu::to_f32;
using DF = hn::ScalableTag<float>;

HWY_INLINE hn::Vec<DF> Sigmoid(DF d, hn::Vec<DF> a) {
  const auto one = hn::Set(d, 1.0f);
  return hn::Div(one, hn::Add(one, ExpClamped(d, hn::Neg(a))));
}
float sigmoid1(float a) { return 1.0f / (1.0f + std::exp(-a)); }

// t = x + bias (the broadcast add)
template <class S>
void AddBiasT(const Pass& p) {
  const DF d;
  const size_t N = hn::Lanes(d), w = size_t(2 * p.h);
  for (int64_t r = p.r0; r < p.r1; ++r) {
    const S* x = static_cast<const S*>(p.x) + r * 2 * p.h;
    float* t = p.t + r * 2 * p.h;
    size_t j = 0;
    for (; j + N <= w; j += N) hn::StoreU(hn::Add(LoadWiden(d, x + j), hn::LoadU(d, p.bias + j)), d, t + j);
    for (; j < w; ++j) t[j] = to_f32(x[j]) + p.bias[j];
  }
}

// s = silu(t[:, :H])
void Silu(const Pass& p) {
  const DF d;
  const size_t N = hn::Lanes(d), h = size_t(p.h);
  for (int64_t r = p.r0; r < p.r1; ++r) {
    const float* a = p.t + r * 2 * p.h;
    float* s = p.s + r * p.h;
    size_t j = 0;
    for (; j + N <= h; j += N) {
      const auto v = hn::LoadU(d, a + j);
      hn::StoreU(hn::Mul(v, Sigmoid(d, v)), d, s + j);
    }
    for (; j < h; ++j) s[j] = a[j] * sigmoid1(a[j]);
  }
}

// y = s * t[:, H:] (T)
template <class S>
void MulT(const Pass& p) {
  const DF d;
  const size_t N = hn::Lanes(d), h = size_t(p.h);
  for (int64_t r = p.r0; r < p.r1; ++r) {
    const float *s = p.s + r * p.h, *c = p.t + r * 2 * p.h + p.h;
    S* y = static_cast<S*>(p.out) + r * p.h;
    size_t j = 0;
    for (; j + N <= h; j += N) StoreRound(d, hn::Mul(hn::LoadU(d, s + j), hn::LoadU(d, c + j)), y + j);
    for (; j < h; ++j) y[j] = from_f32<S>(s[j] * c[j]);
  }
}

// out = dy * other (other: s, or t's c half), f32
template <class S>
void GradMulT(const Pass& p, const float* other, int64_t other_stride, float* out) {
  const DF d;
  const size_t N = hn::Lanes(d), h = size_t(p.h);
  for (int64_t r = p.r0; r < p.r1; ++r) {
    const S* g = static_cast<const S*>(p.dy) + r * p.h;
    const float* o = other + r * other_stride;
    float* q = out + r * p.h;
    size_t j = 0;
    for (; j + N <= h; j += N) hn::StoreU(hn::Mul(LoadWiden(d, g + j), hn::LoadU(d, o + j)), d, q + j);
    for (; j < h; ++j) q[j] = to_f32(g[j]) * o[j];
  }
}
template <class S>
void DcT(const Pass& p) {
  GradMulT<S>(p, p.s, p.h, p.dc);
}
template <class S>
void DsT(const Pass& p) {
  GradMulT<S>(p, p.t + p.h, 2 * p.h, p.ds);
}

// da = ds * s(a) (1 + a (1 - s(a)))   (silu_backward)
void SiluBackward(const Pass& p) {
  const DF d;
  const size_t N = hn::Lanes(d), h = size_t(p.h);
  const auto one = hn::Set(d, 1.0f);
  for (int64_t r = p.r0; r < p.r1; ++r) {
    const float *a = p.t + r * 2 * p.h, *ds = p.ds + r * p.h;
    float* da = p.da + r * p.h;
    size_t j = 0;
    for (; j + N <= h; j += N) {
      const auto v = hn::LoadU(d, a + j), sg = Sigmoid(d, v);
      hn::StoreU(hn::Mul(hn::LoadU(d, ds + j), hn::Mul(sg, hn::Add(one, hn::Mul(v, hn::Sub(one, sg))))), d, da + j);
    }
    for (; j < h; ++j) {
      const float sg = sigmoid1(a[j]);
      da[j] = ds[j] * (sg * (1.0f + a[j] * (1.0f - sg)));
    }
  }
}

// dx = cat(da, dc) (T)
template <class S>
void CatT(const Pass& p) {
  const DF d;
  const size_t N = hn::Lanes(d), h = size_t(p.h);
  for (int64_t r = p.r0; r < p.r1; ++r) {
    S* dx = static_cast<S*>(p.out) + r * 2 * p.h;
    for (int half = 0; half < 2; ++half) {
      const float* src = (half ? p.dc : p.da) + r * p.h;
      S* dst = dx + half * p.h;
      size_t j = 0;
      for (; j + N <= h; j += N) StoreRound(d, hn::LoadU(d, src + j), dst + j);
      for (; j < h; ++j) dst[j] = from_f32<S>(src[j]);
    }
  }
}

// dbias[k] = sum over rows of dx[:, k], columns [r0, r1) of [da | dc] (f32 accumulation, as
// eager's sum), read from the f32 da, dc: eager reads dx itself, which for 16-bit T is half the
// bytes, but its rounded values would put the sum outside our tolerance.
void ColumnSum(const Pass& p) {
  const DF d;
  const size_t N = hn::Lanes(d), h = size_t(p.h);
  std::fill(p.dbias + p.r0, p.dbias + p.r1, 0.0f);
  for (int half = 0; half < 2; ++half) {
    const size_t k0 = std::clamp<size_t>(size_t(p.r0), half * h, (half + 1) * h) - half * h;
    const size_t k1 = std::clamp<size_t>(size_t(p.r1), half * h, (half + 1) * h) - half * h;
    float* sum = p.dbias + half * h;
    for (int64_t r = 0; r < p.n; ++r) {
      const float* src = (half ? p.dc : p.da) + size_t(r) * h;
      size_t k = k0;
      for (; k + N <= k1; k += N) hn::StoreU(hn::Add(hn::LoadU(d, sum + k), hn::LoadU(d, src + k)), d, sum + k);
      for (; k < k1; ++k) sum[k] += src[k];
    }
  }
}

#define OPF_SWIGLU_PEER_STORAGE(Name)                                          \
  void Name(const Pass& p) {                                                   \
    opf::cpu::with_storage(p.dtype, [&](auto s) { Name##T<decltype(s)>(p); }); \
  }
OPF_SWIGLU_PEER_STORAGE(AddBias)
OPF_SWIGLU_PEER_STORAGE(Mul)
OPF_SWIGLU_PEER_STORAGE(Dc)
OPF_SWIGLU_PEER_STORAGE(Ds)
OPF_SWIGLU_PEER_STORAGE(Cat)
#undef OPF_SWIGLU_PEER_STORAGE

}  // namespace opf::suites::peers::swiglu_unfused::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::suites::peers::swiglu_unfused {
HWY_EXPORT(AddBias);
HWY_EXPORT(Silu);
HWY_EXPORT(Mul);
HWY_EXPORT(Dc);
HWY_EXPORT(Ds);
HWY_EXPORT(SiluBackward);
HWY_EXPORT(Cat);
HWY_EXPORT(ColumnSum);

namespace {

std::string unsupported(const PeerCase& c) {
  if (c.shape.size() != 2) return "bias_swiglu shapes are [N, H]";
  if (c.dtype != DType::f32 && c.dtype != DType::f16 && c.dtype != DType::bf16) return "f32, f16 and bf16 only";
  return {};
}

const HostArg& arg(const DrawnCase& d, std::string_view name) {
  for (const HostArg& h : d.host)
    if (h.desc->name == name) return h;
  throw std::runtime_error("bias_swiglu case has no argument '" + std::string(name) + "'");
}

class Run final : public PeerRun {
 public:
  Run(const PeerCase& c, const DrawnCase& drawn)
      : backward_(c.entry == "backward"),
        threads_(std::max(1, c.threads)),
        host_(host_threads(threads_)),
        dtype_(c.dtype),
        n_(c.shape[0]),
        h_(c.shape[1]) {
    const size_t nh = size_t(n_) * size_t(h_);
    const HostArg& x = arg(drawn, "x");
    const HostArg& b = arg(drawn, "bias");
    bias_.resize(size_t(2 * h_));
    for (int64_t k = 0; k < 2 * h_; ++k) bias_[size_t(k)] = float(load_element(c.dtype, b.bytes.data(), k));
    t_.reset(new float[2 * nh]);
    s_.reset(new float[nh]);
    base_ = Pass{int32_t(c.dtype), 0,        0,       n_,      h_,      x.bytes.data(), bias_.data(), nullptr,
                 t_.get(),         s_.get(), nullptr, nullptr, nullptr, nullptr,        nullptr};
    if (!backward_) {
      out_.resize(nh * dtype_size(c.dtype));
    } else {
      // eager's saved tensors: t = x + bias and s = silu(a) (setup, untimed)
      rows([](const Pass& p) { HWY_DYNAMIC_DISPATCH(AddBias)(p); });
      rows([](const Pass& p) { HWY_DYNAMIC_DISPATCH(Silu)(p); });
      dc_.reset(new float[nh]);
      ds_.reset(new float[nh]);
      da_.reset(new float[nh]);
      out_.resize(2 * nh * dtype_size(c.dtype));
      dbias_.resize(size_t(2 * h_));
      base_.dy = arg(drawn, "dy").bytes.data();
      base_.dc = dc_.get();
      base_.ds = ds_.get();
      base_.da = da_.get();
      base_.dbias = dbias_.data();
    }
    base_.out = out_.data();
  }

  void run() override {
    if (!backward_) {
      rows([](const Pass& p) { HWY_DYNAMIC_DISPATCH(AddBias)(p); });
      rows([](const Pass& p) { HWY_DYNAMIC_DISPATCH(Silu)(p); });
      rows([](const Pass& p) { HWY_DYNAMIC_DISPATCH(Mul)(p); });
    } else {
      rows([](const Pass& p) { HWY_DYNAMIC_DISPATCH(Dc)(p); });
      rows([](const Pass& p) { HWY_DYNAMIC_DISPATCH(Ds)(p); });
      rows([](const Pass& p) { HWY_DYNAMIC_DISPATCH(SiluBackward)(p); });
      rows([](const Pass& p) { HWY_DYNAMIC_DISPATCH(Cat)(p); });
      split(2 * h_, [](const Pass& p) { HWY_DYNAMIC_DISPATCH(ColumnSum)(p); });
    }
  }

  bool output(std::string_view name, std::vector<double>& out) const override {
    const bool y = !backward_ && name == "y", dx = backward_ && name == "dx";
    if (y || dx) {
      const int64_t n = n_ * h_ * (dx ? 2 : 1);
      out.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) out[size_t(i)] = load_element(dtype_, out_.data(), i);
      return true;
    }
    if (backward_ && name == "dbias") {
      out.assign(dbias_.begin(), dbias_.end());
      return true;
    }
    return false;
  }

 private:
  // One whole-tensor pass over [0, count) (rows, or columns), cut statically into one block per thread.
  template <class F>
  void split(int64_t count, F&& f) {
    opf::cpu::parallel_for(host_, threads_, [&](int64_t t) {
      Pass p = base_;
      p.r0 = count * t / threads_;
      p.r1 = count * (t + 1) / threads_;
      f(p);
    });
  }
  template <class F>
  void rows(F&& f) {
    split(n_, f);
  }

  bool backward_;
  int threads_;
  const opf_host* host_;
  DType dtype_;
  int64_t n_, h_;
  Pass base_{};
  std::vector<float> bias_, dbias_;
  std::unique_ptr<float[]> t_, s_, dc_, ds_, da_;
  std::vector<std::byte> out_;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

}  // namespace

OPF_PEER_ADAPTER(unfused_bias_swiglu, "unfused", "bias_swiglu", unsupported, make);

}  // namespace opf::suites::peers::swiglu_unfused
#endif  // HWY_ONCE
