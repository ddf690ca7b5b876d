// softmax_xentropy's `unfused` peer: what PyTorch eager runs for
// F.cross_entropy(logits, labels, label_smoothing=s, ignore_index=padding_idx, reduction='none'),
// one whole-tensor pass at a time, each pass vectorised (with our kernel's accurate exp,
// ExpClamped of cpu/exp-inl.h, so that the comparison measures the fusion, not the exp):
//   forward:  log_softmax: logp = x - (m + log sum exp(x - m)) written in full ([N, C] f32),
//             then nll/smoothing: loss = -(1-s) logp_y - (s/C) sum_c logp_c, reading logp back
//             (with s = 0 eager runs nll_loss alone, a gather of N values: so does this peer).
//   backward: softmax = exp(logp) written in full ([N, C] f32), then the one-hot/smoothing
//             subtraction dx = g (p - (1-s)[c = y] - s/C) written as T. logp is what eager saved in
//             forward: the adapter computes it from the case's logits and lse at setup, untimed.
//             (Eager's real backward makes more passes: nll_loss_backward fills a dense [N, C]
//             gradient, the smoothing term is added in another pass, then log_softmax_backward:
//             this peer is a lower bound on its traffic.)
// Padding rows (label = padding_idx): loss 0 and zero gradient rows, as ignore_index.
// Threads: the PeerCase's count; rows split statically into one contiguous block per thread.
#ifndef OPF_XENT_PEER_UNFUSED_COMMON
#define OPF_XENT_PEER_UNFUSED_COMMON
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

namespace opf::suites::peers::xent_unfused {
// One pass over rows [r0, r1).
struct Pass {
  int32_t dtype;  // storage dtype of x / dx
  int64_t r0, r1, cols;
  const void* x;  // logits (T)
  float* logp;    // [N, C] f32
  float* prob;    // [N, C] f32 (backward)
  void* dx;       // [N, C] T (backward)
  const int64_t* labels;
  const float* grad;
  float* loss;
  float smoothing;
  int64_t padding_idx;
};
}  // namespace opf::suites::peers::xent_unfused
#endif  // OPF_XENT_PEER_UNFUSED_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/softmax_xentropy/peer_unfused.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/simd-inl.h"
#include "cpu/exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::suites::peers::xent_unfused::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;
using opf::cpu::from_f32;
using opf::cpu::to_f32;

// log_softmax over the last dim (eager's vectorised kernel: max, sum of exp, write; the row's
// re-reads come from cache), f32 output.
template <class S>
void LogSoftmaxT(const Pass& p) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d), n = size_t(p.cols);
  for (int64_t r = p.r0; r < p.r1; ++r) {
    const S* x = static_cast<const S*>(p.x) + r * p.cols;
    float* out = p.logp + r * p.cols;
    auto vmax = hn::Set(d, -std::numeric_limits<float>::infinity());
    size_t j = 0;
    for (; j + N <= n; j += N) vmax = hn::Max(vmax, LoadWiden(d, x + j));
    float m = MaxLanes(d, vmax);
    for (; j < n; ++j) m = std::max(m, to_f32(x[j]));
    const auto vm = hn::Set(d, m);
    auto vs = hn::Zero(d);
    for (j = 0; j + N <= n; j += N) vs = hn::Add(vs, ExpClamped(d, hn::Sub(LoadWiden(d, x + j), vm)));
    float sum = SumLanes(d, vs);
    for (; j < n; ++j) sum += std::exp(to_f32(x[j]) - m);
    const float lse = m + std::log(sum);
    const auto vlse = hn::Set(d, lse);
    for (j = 0; j + N <= n; j += N) hn::StoreU(hn::Sub(LoadWiden(d, x + j), vlse), d, out + j);
    for (; j < n; ++j) out[j] = to_f32(x[j]) - lse;
  }
}

// nll_loss (+ the smoothing term, which reads every logp back)
void NllSmooth(const Pass& p) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d), n = size_t(p.cols);
  for (int64_t r = p.r0; r < p.r1; ++r) {
    const int64_t y = p.labels[r];
    if (y == p.padding_idx) {
      p.loss[r] = 0.0f;
      continue;
    }
    const float* lp = p.logp + r * p.cols;
    float loss = -(1.0f - p.smoothing) * lp[y];
    if (p.smoothing != 0.0f) {
      auto vs = hn::Zero(d);
      size_t j = 0;
      for (; j + N <= n; j += N) vs = hn::Add(vs, hn::LoadU(d, lp + j));
      float sum = SumLanes(d, vs);
      for (; j < n; ++j) sum += lp[j];
      loss -= p.smoothing / float(p.cols) * sum;
    }
    p.loss[r] = loss;
  }
}

// softmax = exp(logp), f32
void ExpPass(const Pass& p) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d), n = size_t(p.r1 - p.r0) * size_t(p.cols);
  const float* lp = p.logp + p.r0 * p.cols;
  float* out = p.prob + p.r0 * p.cols;
  const auto vfloor = hn::Set(d, kExpFloor);
  size_t j = 0;
  for (; j + N <= n; j += N) {
    const auto t = hn::LoadU(d, lp + j);
    hn::StoreU(hn::IfThenZeroElse(hn::Lt(t, vfloor), ExpClamped(d, t)), d, out + j);
  }
  for (; j < n; ++j) out[j] = std::exp(lp[j]);
}

// dx = g (p - (1-s)[c = y] - s/C), as T
template <class S>
void SubtractT(const Pass& p) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d), n = size_t(p.cols);
  const float keep = 1.0f - p.smoothing, spread = p.smoothing / float(p.cols);
  for (int64_t r = p.r0; r < p.r1; ++r) {
    const float* pr = p.prob + r * p.cols;
    S* dx = static_cast<S*>(p.dx) + r * p.cols;
    const int64_t y = p.labels[r];
    const float g = y == p.padding_idx ? 0.0f : p.grad[r];
    const auto vg = hn::Set(d, g), vspread = hn::Set(d, spread);
    size_t j = 0;
    for (; j + N <= n; j += N) StoreRound(d, hn::Mul(vg, hn::Sub(hn::LoadU(d, pr + j), vspread)), dx + j);
    for (; j < n; ++j) dx[j] = from_f32<S>(g * (pr[j] - spread));
    if (y != p.padding_idx) dx[y] = from_f32<S>(g * (pr[y] - keep - spread));
  }
}

void LogSoftmax(const Pass& p) {
  opf::cpu::with_storage(p.dtype, [&](auto s) { LogSoftmaxT<decltype(s)>(p); });
}
void Subtract(const Pass& p) {
  opf::cpu::with_storage(p.dtype, [&](auto s) { SubtractT<decltype(s)>(p); });
}

}  // namespace opf::suites::peers::xent_unfused::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::suites::peers::xent_unfused {
HWY_EXPORT(LogSoftmax);
HWY_EXPORT(NllSmooth);
HWY_EXPORT(ExpPass);
HWY_EXPORT(Subtract);

namespace {

std::string unsupported(const PeerCase& c) {
  if (c.shape.size() != 2 || c.shape[1] < 1) return "softmax_xentropy shapes are [N, C] with C >= 1";
  if (c.dtype != DType::f32 && c.dtype != DType::f16 && c.dtype != DType::bf16) return "f32, f16 and bf16 only";
  return {};
}

const HostArg& arg(const DrawnCase& d, std::string_view name) {
  for (const HostArg& h : d.host)
    if (h.desc->name == name) return h;
  throw std::runtime_error("softmax_xentropy case has no argument '" + std::string(name) + "'");
}

template <class T>
const T* data_of(const HostArg& h) {
  return reinterpret_cast<const T*>(h.bytes.data());
}

class Run final : public PeerRun {
 public:
  Run(const PeerCase& c, const DrawnCase& drawn)
      : backward_(c.entry == "backward"), threads_(std::max(1, c.threads)), host_(host_threads(threads_)) {
    rows_ = c.shape[0];
    cols_ = c.shape[1];
    const HostArg& logits = arg(drawn, "logits");
    base_ = Pass{int32_t(c.dtype),
                 0,
                 0,
                 cols_,
                 logits.bytes.data(),
                 nullptr,
                 nullptr,
                 nullptr,
                 data_of<int64_t>(arg(drawn, "labels")),
                 nullptr,
                 nullptr,
                 float(c.params.get("smoothing")),
                 c.params.get_int("padding_idx")};
    const size_t n = size_t(rows_) * size_t(cols_);
    logp_.reset(new float[n]);
    if (!backward_) {
      loss_.assign(size_t(rows_), 0.0f);
      base_.loss = loss_.data();
    } else {
      // eager's saved forward output: logp = x - lse (setup, untimed)
      const float* lse = data_of<float>(arg(drawn, "max_log_sum_exp"));
      for (int64_t r = 0; r < rows_; ++r)
        for (int64_t j = 0; j < cols_; ++j)
          logp_[size_t(r * cols_ + j)] = float(load_element(c.dtype, logits.bytes.data(), r * cols_ + j)) - lse[r];
      prob_.reset(new float[n]);
      dx_.resize(n * dtype_size(c.dtype));
      base_.grad = data_of<float>(arg(drawn, "grad_losses"));
      base_.prob = prob_.get();
      base_.dx = dx_.data();
      dtype_ = c.dtype;
    }
    base_.logp = logp_.get();
  }

  void run() override {
    if (!backward_) {
      pass([](const Pass& p) { HWY_DYNAMIC_DISPATCH(LogSoftmax)(p); });
      pass([](const Pass& p) { HWY_DYNAMIC_DISPATCH(NllSmooth)(p); });
    } else {
      pass([](const Pass& p) { HWY_DYNAMIC_DISPATCH(ExpPass)(p); });
      pass([](const Pass& p) { HWY_DYNAMIC_DISPATCH(Subtract)(p); });
    }
  }

  bool output(std::string_view name, std::vector<double>& out) const override {
    if (!backward_ && name == "losses") {
      out.assign(loss_.begin(), loss_.end());
      return true;
    }
    if (backward_ && name == "grad_logits") {
      const int64_t n = rows_ * cols_;
      out.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) out[size_t(i)] = load_element(dtype_, dx_.data(), i);
      return true;
    }
    return false;
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
  int64_t rows_ = 0, cols_ = 0;
  DType dtype_ = DType::f32;
  Pass base_{};
  std::unique_ptr<float[]> logp_, prob_;
  std::vector<std::byte> dx_;
  std::vector<float> loss_;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

}  // namespace

OPF_PEER_ADAPTER(unfused_softmax_xentropy, "unfused", "softmax_xentropy", unsupported, make);

}  // namespace opf::suites::peers::xent_unfused
#endif  // HWY_ONCE
