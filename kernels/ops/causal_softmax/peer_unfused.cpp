// causal_softmax's `unfused` peer: what PyTorch eager runs when the fused kernel is unavailable
// (Megatron's fallback: scores * scale, masked_fill of the upper triangle, softmax) and its
// autograd backward, one whole-tensor pass at a time, each pass vectorised, intermediates in f32
// (so that the peer is judged with our tolerance), results rounded to T:
//   forward:  t = x * scale; t.masked_fill_(triu(ones, 1), -inf) (reads the bool mask [sq, sk]);
//             y = softmax(t) (max, sum of exp, write: the row's re-reads come from cache).
//   backward: g = y * (dy - sum(dy * y)) (softmax_backward); g.masked_fill_(mask, 0);
//             dx = g * scale (T).
// exp is exp-inl.h's ExpClamped (with the same flush below FLT_MIN as our kernel), so that a
// ratio measures the fusion, not the exp.
// Threads: the PeerCase's count; rows split statically into one contiguous block per thread.
#ifndef OPF_CAUSAL_PEER_UNFUSED_COMMON
#define OPF_CAUSAL_PEER_UNFUSED_COMMON
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/parallel.h"
#include "cpu/storage.h"
#include "opforge/threads.h"
#include "peers/peer.h"

namespace opf::suites::peers::causal_unfused {
// One pass over rows [r0, r1) of [batches * s, s].
struct Pass {
  int32_t dtype;
  int64_t r0, r1, s;
  const void* in;       // x (forward) or dy (backward), T
  const void* y;        // backward: the saved output, T
  const uint8_t* mask;  // [s, s], 1 above the diagonal
  float* t;             // [rows, s] f32
  void* out;            // y or dx, T
  float scale;
};
}  // namespace opf::suites::peers::causal_unfused
#endif  // OPF_CAUSAL_PEER_UNFUSED_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/causal_softmax/peer_unfused.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/simd-inl.h"
#include "cpu/exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::suites::peers::causal_unfused::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;
using opf::cpu::from_f32;
using opf::cpu::to_f32;
using DF = hn::ScalableTag<float>;

// t = in * scale
template <class S>
void ScaleT(const Pass& p) {
  const DF d;
  const size_t N = hn::Lanes(d), n = size_t(p.r1 - p.r0) * size_t(p.s);
  const S* in = static_cast<const S*>(p.in) + p.r0 * p.s;
  float* t = p.t + p.r0 * p.s;
  const auto vs = hn::Set(d, p.scale);
  size_t j = 0;
  for (; j + N <= n; j += N) hn::StoreU(hn::Mul(LoadWiden(d, in + j), vs), d, t + j);
  for (; j < n; ++j) t[j] = to_f32(in[j]) * p.scale;
}

// t = fill where mask (the mask row of t's row within its batch)
void MaskedFill(const Pass& p, float fill) {
  const DF d;
  const size_t N = hn::Lanes(d), n = size_t(p.s);
  const auto vf = hn::Set(d, fill);
  for (int64_t r = p.r0; r < p.r1; ++r) {
    float* t = p.t + r * p.s;
    const uint8_t* m = p.mask + (r % p.s) * p.s;
    size_t j = 0;
    for (; j + N <= n; j += N) hn::StoreU(hn::IfThenElse(LoadMaskU8(d, m + j), vf, hn::LoadU(d, t + j)), d, t + j);
    for (; j < n; ++j)
      if (m[j]) t[j] = fill;
  }
}
void MaskInf(const Pass& p) { MaskedFill(p, -std::numeric_limits<float>::infinity()); }
void MaskZero(const Pass& p) { MaskedFill(p, 0.0f); }

// y = softmax(t) over each row (T)
template <class S>
void SoftmaxT(const Pass& p) {
  const DF d;
  const size_t N = hn::Lanes(d), n = size_t(p.s);
  const auto vfloor = hn::Set(d, kExpFloor);
  for (int64_t r = p.r0; r < p.r1; ++r) {
    float* t = p.t + r * p.s;
    S* y = static_cast<S*>(p.out) + r * p.s;
    auto vmax = hn::Set(d, -std::numeric_limits<float>::infinity());
    size_t j = 0;
    for (; j + N <= n; j += N) vmax = hn::Max(vmax, hn::LoadU(d, t + j));
    float m = MaxLanes(d, vmax);
    for (; j < n; ++j) m = std::max(m, t[j]);
    const auto vm = hn::Set(d, m);
    auto vsum = hn::Zero(d);
    for (j = 0; j + N <= n; j += N) {
      const auto u = hn::Sub(hn::LoadU(d, t + j), vm);
      const auto e = hn::IfThenZeroElse(hn::Lt(u, vfloor), ExpClamped(d, u));
      hn::StoreU(e, d, t + j);
      vsum = hn::Add(vsum, e);
    }
    float sum = SumLanes(d, vsum);
    for (; j < n; ++j) sum += (t[j] = t[j] - m < kExpFloor ? 0.0f : std::exp(t[j] - m));
    const float inv = 1.0f / sum;
    const auto vinv = hn::Set(d, inv);
    for (j = 0; j + N <= n; j += N) StoreRound(d, hn::Mul(hn::LoadU(d, t + j), vinv), y + j);
    for (; j < n; ++j) y[j] = from_f32<S>(t[j] * inv);
  }
}

// t = y * (dy - sum(dy * y)) per row
template <class S>
void SoftmaxBackwardT(const Pass& p) {
  const DF d;
  const size_t N = hn::Lanes(d), n = size_t(p.s);
  for (int64_t r = p.r0; r < p.r1; ++r) {
    const S* g = static_cast<const S*>(p.in) + r * p.s;
    const S* y = static_cast<const S*>(p.y) + r * p.s;
    float* t = p.t + r * p.s;
    auto vdot = hn::Zero(d);
    size_t j = 0;
    for (; j + N <= n; j += N) vdot = hn::MulAdd(LoadWiden(d, g + j), LoadWiden(d, y + j), vdot);
    float dot = SumLanes(d, vdot);
    for (; j < n; ++j) dot += to_f32(g[j]) * to_f32(y[j]);
    const auto vd = hn::Set(d, dot);
    for (j = 0; j + N <= n; j += N)
      hn::StoreU(hn::Mul(LoadWiden(d, y + j), hn::Sub(LoadWiden(d, g + j), vd)), d, t + j);
    for (; j < n; ++j) t[j] = to_f32(y[j]) * (to_f32(g[j]) - dot);
  }
}

// dx = t * scale (T)
template <class S>
void ScaleOutT(const Pass& p) {
  const DF d;
  const size_t N = hn::Lanes(d), n = size_t(p.r1 - p.r0) * size_t(p.s);
  const float* t = p.t + p.r0 * p.s;
  S* out = static_cast<S*>(p.out) + p.r0 * p.s;
  const auto vs = hn::Set(d, p.scale);
  size_t j = 0;
  for (; j + N <= n; j += N) StoreRound(d, hn::Mul(hn::LoadU(d, t + j), vs), out + j);
  for (; j < n; ++j) out[j] = from_f32<S>(t[j] * p.scale);
}

#define OPF_CAUSAL_PEER_STORAGE(Name)                                          \
  void Name(const Pass& p) {                                                   \
    opf::cpu::with_storage(p.dtype, [&](auto s) { Name##T<decltype(s)>(p); }); \
  }
OPF_CAUSAL_PEER_STORAGE(Scale)
OPF_CAUSAL_PEER_STORAGE(Softmax)
OPF_CAUSAL_PEER_STORAGE(SoftmaxBackward)
OPF_CAUSAL_PEER_STORAGE(ScaleOut)
#undef OPF_CAUSAL_PEER_STORAGE

}  // namespace opf::suites::peers::causal_unfused::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::suites::peers::causal_unfused {
HWY_EXPORT(Scale);
HWY_EXPORT(MaskInf);
HWY_EXPORT(MaskZero);
HWY_EXPORT(Softmax);
HWY_EXPORT(SoftmaxBackward);
HWY_EXPORT(ScaleOut);

namespace {

std::string unsupported(const PeerCase& c) {
  if (c.shape.size() != 3 || c.shape[1] != c.shape[2])
    return "causal_softmax shapes are [attn_batches, sq, sk], sq == sk";
  if (c.dtype != DType::f32 && c.dtype != DType::f16 && c.dtype != DType::bf16) return "f32, f16 and bf16 only";
  return {};
}

const HostArg& arg(const DrawnCase& d, std::string_view name) {
  for (const HostArg& h : d.host)
    if (h.desc->name == name) return h;
  throw std::runtime_error("causal_softmax case has no argument '" + std::string(name) + "'");
}

class Run final : public PeerRun {
 public:
  Run(const PeerCase& c, const DrawnCase& drawn)
      : backward_(c.entry == "backward"),
        threads_(std::max(1, c.threads)),
        host_(host_threads(threads_)),
        dtype_(c.dtype),
        rows_(c.shape[0] * c.shape[1]),
        s_(c.shape[1]) {
    const size_t n = size_t(rows_) * size_t(s_);
    mask_.resize(size_t(s_ * s_));
    for (int64_t i = 0; i < s_; ++i)
      for (int64_t j = 0; j < s_; ++j) mask_[size_t(i * s_ + j)] = j > i;
    t_.reset(new float[n]);
    out_.resize(n * dtype_size(c.dtype));
    base_ = Pass{int32_t(c.dtype),
                 0,
                 0,
                 s_,
                 arg(drawn, backward_ ? "dy" : "x").bytes.data(),
                 backward_ ? arg(drawn, "y").bytes.data() : nullptr,
                 mask_.data(),
                 t_.get(),
                 out_.data(),
                 float(c.params.get("scale"))};
  }

  void run() override {
    if (!backward_) {
      pass([](const Pass& p) { HWY_DYNAMIC_DISPATCH(Scale)(p); });
      pass([](const Pass& p) { HWY_DYNAMIC_DISPATCH(MaskInf)(p); });
      pass([](const Pass& p) { HWY_DYNAMIC_DISPATCH(Softmax)(p); });
    } else {
      pass([](const Pass& p) { HWY_DYNAMIC_DISPATCH(SoftmaxBackward)(p); });
      pass([](const Pass& p) { HWY_DYNAMIC_DISPATCH(MaskZero)(p); });
      pass([](const Pass& p) { HWY_DYNAMIC_DISPATCH(ScaleOut)(p); });
    }
  }

  bool output(std::string_view name, std::vector<double>& out) const override {
    if (name != (backward_ ? "dy" : "y")) return false;
    const int64_t n = rows_ * s_;
    out.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = load_element(dtype_, out_.data(), i);
    return true;
  }

 private:
  // One whole-tensor pass: the rows cut statically into one block per thread.
  template <class F>
  void pass(F&& f) {
    opf::cpu::parallel_for(host_, threads_, [&](int64_t t) {
      Pass p = base_;
      p.r0 = rows_ * t / threads_;
      p.r1 = rows_ * (t + 1) / threads_;
      f(p);
    });
  }

  bool backward_;
  int threads_;
  const opf_host* host_;
  DType dtype_;
  int64_t rows_, s_;
  Pass base_{};
  std::vector<uint8_t> mask_;
  std::unique_ptr<float[]> t_;
  std::vector<std::byte> out_;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

}  // namespace

OPF_PEER_ADAPTER(unfused_causal_softmax, "unfused", "causal_softmax", unsupported, make);

}  // namespace opf::suites::peers::causal_unfused
#endif  // HWY_ONCE
