// focal_loss's `unfused` peer: what PyTorch eager runs for torchvision's sigmoid_focal_loss on the
// real classes (x = logits[:, :K].float(), targets one-hot from the labels, smoothed, ignored rows
// masked), then loss.sum() and autograd's backward down to the logits, one whole-tensor pass per
// elementwise op, every intermediate an f32 [N, K] tensor:
//   forward:  x = cast(logits[:, :K]); t = one_hot(labels); t = t (1-s) + s/2 (s > 0);
//             p = sigmoid(x); ce = bce_with_logits(x, t); p_t = p t + (1-p)(1-t);
//             mod = (1 - p_t)^gamma; l = ce mod; a_t = alpha t + (1-alpha)(1-t); l = a_t l;
//             l = l valid (ignored rows); loss = sum(l) / num_positives_sum
//   gradient: gl = a_t valid; gce = gl mod; gmod = gl ce; gpt = -gamma gmod (1-p_t)^(gamma-1);
//             gp = gpt (2t - 1); gs = gp p (1-p); gx = gce (p - t); gx = gx + gs; partial_grad =
//             zeros [N, Cpad] then the slice's copy-back cast to T
// The forward entry is compared (apex's forward returns the unnormalized gradient too); backward
// (a scalar scale of a saved gradient) has no eager counterpart of its own: unsupported.
// Transcendentals: Highway's Exp/Log1p/Log (the kernel's own), so that the comparison measures the
// fusion. Threads: the PeerCase's count; rows split statically into one block per thread.
#ifndef OPF_FOCAL_PEER_UNFUSED_COMMON
#define OPF_FOCAL_PEER_UNFUSED_COMMON
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

namespace opf::suites::peers::focal_unfused {
enum Buf { X, T, P, CE, PT, MOD, AT, L, GL, GA, GB, kBufs };
enum Op {
  kCast,
  kOneHot,
  kSmooth,
  kSigmoid,
  kBce,
  kPt,
  kMod,
  kMulCeMod,
  kAlphaT,
  kMulAt,
  kMask,
  kGradL,
  kGradCe,
  kGradMod,
  kGradPt,
  kGradP,
  kGradSig,
  kGradCeX,
  kAddGrad,
  kZero,
  kCopyBack,
  kOps
};
struct Pass {
  int32_t dtype;
  int64_t r0, r1, cols, real;
  const void* logits;
  void* grad;  // partial_grad, T [N, Cpad]
  const int64_t* labels;
  float* buf[kBufs];  // f32 [N, K] each
  float alpha, gamma, smoothing;
};
}  // namespace opf::suites::peers::focal_unfused
#endif  // OPF_FOCAL_PEER_UNFUSED_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/focal_loss/peer_unfused.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
#include "cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::suites::peers::focal_unfused::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;
using opf::cpu::from_f32;
using opf::cpu::to_f32;

// out[i] = f(d, i) over the block's [N, K] elements: whole vectors, then one lane at a time.
template <class F>
HWY_INLINE void Map(float* out, size_t i0, size_t i1, F&& f) {
  const hn::ScalableTag<float> d;
  const hn::CappedTag<float, 1> d1;
  const size_t N = hn::Lanes(d);
  size_t i = i0;
  for (; i + N <= i1; i += N) hn::StoreU(f(d, i), d, out + i);
  for (; i < i1; ++i) hn::StoreU(f(d1, i), d1, out + i);
}

template <class D>
HWY_INLINE hn::Vec<D> Pow(D d, hn::Vec<D> base, float e) {  // base >= 0; 0^e = 0 for e > 0
  const auto r = hn::Exp(d, hn::Min(hn::Mul(hn::Set(d, e), hn::Log(d, base)), hn::Set(d, 88.0f)));
  return hn::IfThenZeroElse(hn::Eq(base, hn::Zero(d)), r);
}

// The forward's tensor ops (PyTorch's sigmoid_focal_loss, one pass each); false for another op.
template <class S>
bool RunForwardOp(const Pass& p, int op) {
  const size_t K = size_t(p.real), i0 = size_t(p.r0) * K, i1 = size_t(p.r1) * K;
  float* const* b = p.buf;
  const float a = p.alpha, g = p.gamma, s = p.smoothing;
  const auto ld = [](auto d, const float* q, size_t i) { return hn::LoadU(d, q + i); };
  switch (op) {
    case kCast:
      for (int64_t r = p.r0; r < p.r1; ++r) {
        const S* x = static_cast<const S*>(p.logits) + r * p.cols;
        Map(b[X], size_t(r) * K, size_t(r + 1) * K,
            [&](auto d, size_t i) { return LoadWiden(d, x + (i - size_t(r) * K)); });
      }
      break;
    case kOneHot:
      std::fill(b[T] + i0, b[T] + i1, 0.0f);
      for (int64_t r = p.r0; r < p.r1; ++r)
        if (p.labels[r] >= 0) b[T][size_t(r) * K + size_t(p.labels[r])] = 1.0f;
      break;
    case kSmooth:
      Map(b[T], i0, i1,
          [&](auto d, size_t i) { return hn::MulAdd(ld(d, b[T], i), hn::Set(d, 1 - s), hn::Set(d, s / 2)); });
      break;
    case kSigmoid:
      Map(b[P], i0, i1, [&](auto d, size_t i) {
        const auto one = hn::Set(d, 1.0f);
        // (Highway's Exp is valid up to 104: exp(88) ~ 1.7e38 already makes p ~ 0)
        return hn::Div(one, hn::Add(one, hn::Exp(d, hn::Min(hn::Neg(ld(d, b[X], i)), hn::Set(d, 88.0f)))));
      });
      break;
    case kBce:  // (1 - t) x + max(-x, 0) + log1p(exp(-|x|)), PyTorch's stable form
      Map(b[CE], i0, i1, [&](auto d, size_t i) {
        const auto x = ld(d, b[X], i), t = ld(d, b[T], i);
        const auto sp = hn::Add(hn::Max(hn::Neg(x), hn::Zero(d)), hn::Log1p(d, hn::Exp(d, hn::Neg(hn::Abs(x)))));
        return hn::Add(hn::Mul(hn::Sub(hn::Set(d, 1.0f), t), x), sp);
      });
      break;
    case kPt:
      Map(b[PT], i0, i1, [&](auto d, size_t i) {
        const auto pr = ld(d, b[P], i), t = ld(d, b[T], i), one = hn::Set(d, 1.0f);
        return hn::Add(hn::Mul(pr, t), hn::Mul(hn::Sub(one, pr), hn::Sub(one, t)));
      });
      break;
    case kMod:
      Map(b[MOD], i0, i1, [&](auto d, size_t i) {
        return g == 0 ? hn::Set(d, 1.0f) : Pow(d, hn::Sub(hn::Set(d, 1.0f), ld(d, b[PT], i)), g);
      });
      break;
    case kMulCeMod:
      Map(b[L], i0, i1, [&](auto d, size_t i) { return hn::Mul(ld(d, b[CE], i), ld(d, b[MOD], i)); });
      break;
    case kAlphaT:
      Map(b[AT], i0, i1, [&](auto d, size_t i) {
        const auto t = ld(d, b[T], i);
        return hn::Add(hn::Mul(hn::Set(d, a), t), hn::Mul(hn::Set(d, 1 - a), hn::Sub(hn::Set(d, 1.0f), t)));
      });
      break;
    case kMulAt: Map(b[L], i0, i1, [&](auto d, size_t i) { return hn::Mul(ld(d, b[AT], i), ld(d, b[L], i)); }); break;
    default: return false;
  }
  return true;
}

// The backward's tensor ops (autograd's, one pass each), the mask and the copy back.
template <class S>
void RunBackwardOp(const Pass& p, int op) {
  const size_t K = size_t(p.real), i0 = size_t(p.r0) * K, i1 = size_t(p.r1) * K;
  float* const* b = p.buf;
  const float g = p.gamma;
  const auto ld = [](auto d, const float* q, size_t i) { return hn::LoadU(d, q + i); };
  switch (op) {
    case kMask:
    case kGradL:  // l * valid; gl = a_t * valid (the mask row by row, a broadcast [N, 1] tensor)
      for (int64_t r = p.r0; r < p.r1; ++r) {
        const float valid = p.labels[r] == -2 ? 0.0f : 1.0f;
        float* out = b[op == kMask ? L : GL];
        const float* in = b[op == kMask ? L : AT];
        Map(out, size_t(r) * K, size_t(r + 1) * K,
            [&](auto d, size_t i) { return hn::Mul(ld(d, in, i), hn::Set(d, valid)); });
      }
      break;
    case kGradCe:
      Map(b[GA], i0, i1, [&](auto d, size_t i) { return hn::Mul(ld(d, b[GL], i), ld(d, b[MOD], i)); });
      break;
    case kGradMod:
      Map(b[GB], i0, i1, [&](auto d, size_t i) { return hn::Mul(ld(d, b[GL], i), ld(d, b[CE], i)); });
      break;
    case kGradPt:  // d/dp_t (1-p_t)^gamma = -gamma (1-p_t)^(gamma-1)
      Map(b[GB], i0, i1, [&](auto d, size_t i) {
        const auto base = hn::Sub(hn::Set(d, 1.0f), ld(d, b[PT], i));
        const auto dm = g == 0 ? hn::Zero(d) : g == 1 ? hn::Set(d, 1.0f) : Pow(d, base, g - 1);
        return hn::Mul(hn::Mul(hn::Set(d, -g), dm), ld(d, b[GB], i));
      });
      break;
    case kGradP:
      Map(b[GB], i0, i1, [&](auto d, size_t i) {
        return hn::Mul(ld(d, b[GB], i), hn::MulSub(hn::Set(d, 2.0f), ld(d, b[T], i), hn::Set(d, 1.0f)));
      });
      break;
    case kGradSig:
      Map(b[GB], i0, i1, [&](auto d, size_t i) {
        const auto pr = ld(d, b[P], i);
        return hn::Mul(ld(d, b[GB], i), hn::Mul(pr, hn::Sub(hn::Set(d, 1.0f), pr)));
      });
      break;
    case kGradCeX:  // binary_cross_entropy_with_logits_backward: (sigmoid(x) - t) grad
      Map(b[GA], i0, i1,
          [&](auto d, size_t i) { return hn::Mul(ld(d, b[GA], i), hn::Sub(ld(d, b[P], i), ld(d, b[T], i))); });
      break;
    case kAddGrad:
      Map(b[GA], i0, i1, [&](auto d, size_t i) { return hn::Add(ld(d, b[GA], i), ld(d, b[GB], i)); });
      break;
    case kZero:
      std::memset(static_cast<S*>(p.grad) + p.r0 * p.cols, 0, size_t(p.r1 - p.r0) * size_t(p.cols) * sizeof(S));
      break;
    case kCopyBack: {
      const hn::ScalableTag<float> d;
      const size_t N = hn::Lanes(d);
      for (int64_t r = p.r0; r < p.r1; ++r) {
        S* out = static_cast<S*>(p.grad) + r * p.cols;
        const float* in = b[GA] + size_t(r) * K;
        size_t j = 0;
        for (; j + N <= K; j += N) StoreRound(d, hn::LoadU(d, in + j), out + j);
        for (; j < K; ++j) out[j] = from_f32<S>(in[j]);
      }
      break;
    }
    default: break;
  }
}

void Run(const Pass& p, int op) {
  opf::cpu::with_storage(p.dtype, [&](auto s) {
    if (!RunForwardOp<decltype(s)>(p, op)) RunBackwardOp<decltype(s)>(p, op);
  });
}

}  // namespace opf::suites::peers::focal_unfused::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::suites::peers::focal_unfused {
HWY_EXPORT(Run);

namespace {

std::string unsupported(const PeerCase& c) {
  if (c.entry != "forward")
    return "eager has no backward of its own to match: its gradient passes are part of this peer's forward";
  if (c.shape.size() != 2) return "focal_loss shapes are [N, Cpad]";
  if (c.dtype != DType::f32 && c.dtype != DType::f16 && c.dtype != DType::bf16) return "f32, f16 and bf16 only";
  const int64_t k = c.params.get_int("num_real_classes");
  if (k < 1 || k > c.shape[1]) return "num_real_classes outside [1, Cpad]";
  return {};
}

const HostArg& arg(const DrawnCase& d, std::string_view name) {
  for (const HostArg& h : d.host)
    if (h.desc->name == name) return h;
  throw std::runtime_error("focal_loss case has no argument '" + std::string(name) + "'");
}

class PeerRunImpl final : public PeerRun {
 public:
  PeerRunImpl(const PeerCase& c, const DrawnCase& drawn)
      : threads_(std::max(1, c.threads)), host_(host_threads(threads_)) {
    rows_ = c.shape[0];
    cols_ = c.shape[1];
    real_ = c.params.get_int("num_real_classes");
    dtype_ = c.dtype;
    const size_t n = size_t(rows_) * size_t(real_);
    storage_.reset(new float[std::max<size_t>(n, 1) * kBufs]);
    grad_.resize(size_t(rows_ * cols_) * dtype_size(c.dtype));
    base_ = Pass{int32_t(c.dtype),
                 0,
                 0,
                 cols_,
                 real_,
                 arg(drawn, "logits").bytes.data(),
                 grad_.data(),
                 reinterpret_cast<const int64_t*>(arg(drawn, "labels").bytes.data()),
                 {},
                 float(c.params.get("alpha")),
                 float(c.params.get("gamma")),
                 float(c.params.get("label_smoothing"))};
    for (int k = 0; k < kBufs; ++k) base_.buf[k] = storage_.get() + size_t(k) * n;
    num_pos_ = *reinterpret_cast<const float*>(arg(drawn, "num_positives_sum").bytes.data());
    partial_.assign(size_t(threads_), 0.0);
  }

  void run() override {
    for (int op = kCast; op < kOps; ++op) {
      if (op == kSmooth && base_.smoothing == 0.0f) continue;
      pass(op);
      if (op == kMask) sum();
    }
  }

  bool output(std::string_view name, std::vector<double>& out) const override {
    if (name == "loss") {
      out.assign(1, double(loss_));
      return true;
    }
    if (name == "partial_grad") {
      const int64_t n = rows_ * cols_;
      out.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) out[size_t(i)] = load_element(dtype_, grad_.data(), i);
      return true;
    }
    return false;
  }

 private:
  void pass(int op) {
    opf::cpu::parallel_for(host_, threads_, [&](int64_t t) {
      Pass p = base_;
      p.r0 = rows_ * t / threads_;
      p.r1 = rows_ * (t + 1) / threads_;
      HWY_DYNAMIC_DISPATCH(Run)(p, op);
    });
  }
  // loss.sum() (a reduction pass, per thread, then the thread partials) / num_positives_sum
  void sum() {
    const float* l = base_.buf[L];
    opf::cpu::parallel_for(host_, threads_, [&](int64_t t) {
      const size_t i0 = size_t(rows_ * t / threads_) * size_t(real_),
                   i1 = size_t(rows_ * (t + 1) / threads_) * size_t(real_);
      double s = 0;  // (eager's cascade sum is accurate too; a serial f32 sum would not be)
      for (size_t i = i0; i < i1; ++i) s += l[i];
      partial_[size_t(t)] = s;
    });
    double s = 0;
    for (double v : partial_) s += v;
    loss_ = float(s / double(num_pos_));
  }

  int threads_;
  const opf_host* host_;
  int64_t rows_ = 0, cols_ = 0, real_ = 0;
  DType dtype_ = DType::f32;
  Pass base_{};
  std::unique_ptr<float[]> storage_;
  std::vector<std::byte> grad_;
  std::vector<double> partial_;
  float num_pos_ = 1, loss_ = 0;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) {
  return std::make_unique<PeerRunImpl>(c, drawn);
}

}  // namespace

OPF_PEER_ADAPTER(unfused_focal_loss, "unfused", "focal_loss", unsupported, make);

}  // namespace opf::suites::peers::focal_unfused
#endif  // HWY_ONCE
