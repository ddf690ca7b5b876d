// transducer_loss's `unfused` peer: the loss as a composition of whole-tensor passes, what a
// PyTorch eager implementation of apex's TransducerLoss runs (one kernel per step, every
// intermediate materialised):
//   forward:  two gathers, lp_blank[B, T, U1] and lp_label[B, T, U1] (f32), then the alpha
//             recurrence and the beta recurrence as separate passes over them, loss = -beta(0,0).
//   backward: fuse_softmax_backward: prob = exp(x) written in full ([rows, V] f32), the cell
//             occupancies occ = exp(alpha + beta - beta00) [B, T, U1], then x_grad = g occ prob
//             (written as T), then the blank edges and the label edges subtracted by two scatter
//             passes (a label equal to blank: the blank pass takes both edges); without it:
//             x_grad zero-filled, then the two scatters. The gradient is built in f32 and cast
//             to T by a last pass (16-bit storage only), as eager's autocast-free f32 math would.
//             (The passes are vectorised with our kernel's exp, ExpClamped of cpu/exp-inl.h, so
//             that the comparison measures the fusion, not the exp.)
// Threads: the PeerCase's count; each pass splits batches (lattices) or rows statically.
#ifndef OPF_TLOSS_PEER_UNFUSED_COMMON
#define OPF_TLOSS_PEER_UNFUSED_COMMON
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

namespace opf::suites::peers::tloss_unfused {
// One elementwise pass over x rows [r0, r1).
struct RowPass {
  int32_t dtype;
  int64_t r0, r1, V;
  const void* x;       // T [rows, V]
  float* prob;         // f32 [rows, V]
  const float* scale;  // per row: g * occ
  float* dx32;         // f32 [rows, V]: the gradient before its cast
  void* dx;            // T [rows, V]
};
}  // namespace opf::suites::peers::tloss_unfused
#endif  // OPF_TLOSS_PEER_UNFUSED_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/transducer_loss/peer_unfused.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/simd-inl.h"
#include "cpu/exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::suites::peers::tloss_unfused::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;
using opf::cpu::from_f32;
using opf::cpu::to_f32;

// prob = exp(x)
template <class S>
void ExpRowsT(const RowPass& p) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d), n = size_t((p.r1 - p.r0) * p.V);
  const S* x = static_cast<const S*>(p.x) + p.r0 * p.V;
  float* y = p.prob + p.r0 * p.V;
  size_t j = 0;
  for (; j + N <= n; j += N) hn::StoreU(ExpClamped(d, LoadWiden(d, x + j)), d, y + j);
  for (; j < n; ++j) y[j] = std::exp(to_f32(x[j]));
}

// dx32 = scale[row] * prob
void ScaleRows(const RowPass& p) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d), V = size_t(p.V);
  for (int64_t r = p.r0; r < p.r1; ++r) {
    const float* q = p.prob + r * p.V;
    float* y = p.dx32 + r * p.V;
    const auto s = hn::Set(d, p.scale[r]);
    size_t j = 0;
    for (; j + N <= V; j += N) hn::StoreU(hn::Mul(s, hn::LoadU(d, q + j)), d, y + j);
    for (; j < V; ++j) y[j] = p.scale[r] * q[j];
  }
}

// dx = dx32 in the storage dtype (16-bit only: f32 uses dx32 as its output)
template <class S>
void CastRowsT(const RowPass& p) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d), n = size_t((p.r1 - p.r0) * p.V);
  const float* x = p.dx32 + p.r0 * p.V;
  S* y = static_cast<S*>(p.dx) + p.r0 * p.V;
  size_t j = 0;
  for (; j + N <= n; j += N) StoreRound(d, hn::LoadU(d, x + j), y + j);
  for (; j < n; ++j) y[j] = from_f32<S>(x[j]);
}

void ExpRows(const RowPass& p) {
  opf::cpu::with_storage(p.dtype, [&](auto s) { ExpRowsT<decltype(s)>(p); });
}
void CastRows(const RowPass& p) {
  opf::cpu::with_storage(p.dtype, [&](auto s) { CastRowsT<decltype(s)>(p); });
}

}  // namespace opf::suites::peers::tloss_unfused::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::suites::peers::tloss_unfused {
HWY_EXPORT(ExpRows);
HWY_EXPORT(ScaleRows);
HWY_EXPORT(CastRows);

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

float log_add_exp(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return a + b;
  if (a == kNegInf) return b;
  if (b == kNegInf) return a;
  return std::max(a, b) + std::log1p(std::exp(-std::fabs(a - b)));
}

std::string unsupported(const PeerCase& c) {
  if (c.shape.size() != 4) return "transducer_loss shapes are [B, T, U1, V]";
  if (c.dtype != DType::f32 && c.dtype != DType::f16 && c.dtype != DType::bf16) return "f32, f16 and bf16 only";
  return {};
}

const HostArg& arg(const DrawnCase& d, std::string_view name) {
  for (const HostArg& h : d.host)
    if (h.desc->name == name) return h;
  throw std::runtime_error("transducer_loss case has no argument '" + std::string(name) + "'");
}

template <class T>
const T* data_of(const HostArg& h) {
  return reinterpret_cast<const T*>(h.bytes.data());
}

class Run final : public PeerRun {
 public:
  Run(const PeerCase& c, const DrawnCase& drawn)
      : backward_(c.entry == "backward"), threads_(std::max(1, c.threads)), host_(host_threads(threads_)) {
    B_ = c.shape[0], T_ = c.shape[1], U1_ = c.shape[2], V_ = c.shape[3];
    dtype_ = c.dtype;
    blank_ = c.params.get_int("blank_idx");
    packed_ = c.params.flag("packed_input");
    fused_ = c.params.flag("fuse_softmax_backward");
    const HostArg& x = arg(drawn, "x");
    x_ = x.bytes.data();
    rows_ = x.desc->shape[0] * (packed_ ? 1 : T_ * U1_);
    label_ = data_of<int64_t>(arg(drawn, "label"));
    f_len_ = data_of<int64_t>(arg(drawn, "f_len"));
    y_len_ = data_of<int64_t>(arg(drawn, "y_len"));
    int64_t at = 0;
    for (int64_t b = 0; b < B_; ++b) {
      start_.push_back(packed_ ? at : b * T_ * U1_);
      at += f_len_[b] * (y_len_[b] + 1);
    }
    const size_t cells = size_t(B_ * T_ * U1_);
    if (!backward_) {
      lp_blank_.assign(cells, 0.0f);
      lp_label_.assign(cells, 0.0f);
      alpha_.assign(cells, kNegInf);
      beta_.assign(cells, kNegInf);
      loss_.assign(size_t(B_), 0.0f);
    } else {
      alpha_in_ = data_of<float>(arg(drawn, "alpha"));
      beta_in_ = data_of<float>(arg(drawn, "beta"));
      grad_ = data_of<float>(arg(drawn, "loss_grad"));
      occ_.assign(size_t(rows_), 0.0f);
      if (fused_) prob_.reset(new float[size_t(rows_ * V_)]);
      dx32_.assign(size_t(rows_ * V_), 0.0f);
      if (dtype_ != DType::f32) dx_.resize(size_t(rows_ * V_) * dtype_size(dtype_));
    }
  }

  void run() override {
    if (!backward_) {
      per_batch([&](int64_t b) { gather(b); });
      per_batch([&](int64_t b) { alpha(b); });
      per_batch([&](int64_t b) { beta(b); });
      return;
    }
    if (fused_) {
      per_rows([&](int64_t r0, int64_t r1) {
        HWY_DYNAMIC_DISPATCH(ExpRows)(RowPass{int32_t(dtype_), r0, r1, V_, x_, prob_.get(), nullptr, nullptr, nullptr});
      });
      per_batch([&](int64_t b) { occupancy(b); });
      per_rows([&](int64_t r0, int64_t r1) {
        HWY_DYNAMIC_DISPATCH(ScaleRows)
        (RowPass{int32_t(dtype_), r0, r1, V_, x_, prob_.get(), occ_.data(), dx32_.data(), nullptr});
      });
    } else {
      per_rows([&](int64_t r0, int64_t r1) {
        std::memset(dx32_.data() + r0 * V_, 0, size_t((r1 - r0) * V_) * sizeof(float));
      });
    }
    per_batch([&](int64_t b) { scatter(b, false); });
    per_batch([&](int64_t b) { scatter(b, true); });
    if (dtype_ != DType::f32)
      per_rows([&](int64_t r0, int64_t r1) {
        HWY_DYNAMIC_DISPATCH(CastRows)
        (RowPass{int32_t(dtype_), r0, r1, V_, x_, nullptr, nullptr, dx32_.data(), dx_.data()});
      });
  }

  bool output(std::string_view name, std::vector<double>& out) const override {
    if (!backward_ && (name == "loss" || name == "alpha" || name == "beta")) {
      const auto& v = name == "loss" ? loss_ : name == "alpha" ? alpha_ : beta_;
      out.assign(v.begin(), v.end());
      return true;
    }
    if (backward_ && name == "x_grad") {
      out.resize(size_t(rows_ * V_));
      for (int64_t i = 0; i < rows_ * V_; ++i)
        out[size_t(i)] = dtype_ == DType::f32 ? double(dx32_[size_t(i)]) : load_element(dtype_, dx_.data(), i);
      return true;
    }
    return false;
  }

 private:
  int64_t row(int64_t b, int64_t t, int64_t u) const {
    return start_[size_t(b)] + t * (packed_ ? y_len_[b] + 1 : U1_) + u;
  }
  float lp(int64_t r, int64_t v) const { return float(load_element(dtype_, x_, r * V_ + v)); }
  int64_t y(int64_t b, int64_t u) const { return label_[b * (U1_ - 1) + u]; }
  size_t cell(int64_t b, int64_t t, int64_t u) const { return size_t((b * T_ + t) * U1_ + u); }

  void gather(int64_t b) {
    for (int64_t t = 0; t < f_len_[b]; ++t)
      for (int64_t u = 0; u <= y_len_[b]; ++u) {
        lp_blank_[cell(b, t, u)] = lp(row(b, t, u), blank_);
        if (u < y_len_[b]) lp_label_[cell(b, t, u)] = lp(row(b, t, u), y(b, u));
      }
  }
  void alpha(int64_t b) {
    for (int64_t t = 0; t < f_len_[b]; ++t)
      for (int64_t u = 0; u <= y_len_[b]; ++u) {
        float& a = alpha_[cell(b, t, u)];
        if (t == 0 && u == 0) a = 0;
        else if (t == 0) a = alpha_[cell(b, t, u - 1)] + lp_label_[cell(b, t, u - 1)];
        else if (u == 0) a = alpha_[cell(b, t - 1, u)] + lp_blank_[cell(b, t - 1, u)];
        else
          a = log_add_exp(alpha_[cell(b, t - 1, u)] + lp_blank_[cell(b, t - 1, u)],
                          alpha_[cell(b, t, u - 1)] + lp_label_[cell(b, t, u - 1)]);
      }
  }
  void beta(int64_t b) {
    const int64_t Tf = f_len_[b], Uy = y_len_[b];
    for (int64_t t = Tf - 1; t >= 0; --t)
      for (int64_t u = Uy; u >= 0; --u) {
        float& be = beta_[cell(b, t, u)];
        if (t == Tf - 1 && u == Uy) be = lp_blank_[cell(b, t, u)];
        else if (t == Tf - 1) be = beta_[cell(b, t, u + 1)] + lp_label_[cell(b, t, u)];
        else if (u == Uy) be = beta_[cell(b, t + 1, u)] + lp_blank_[cell(b, t, u)];
        else
          be = log_add_exp(beta_[cell(b, t + 1, u)] + lp_blank_[cell(b, t, u)],
                           beta_[cell(b, t, u + 1)] + lp_label_[cell(b, t, u)]);
      }
    loss_[size_t(b)] = -beta_[cell(b, 0, 0)];
  }
  // per x row: g * exp(alpha + beta - beta00) (0 for padding rows)
  void occupancy(int64_t b) {
    const float total = beta_in_[cell(b, 0, 0)], g = grad_[b];
    for (int64_t t = 0; t < f_len_[b]; ++t)
      for (int64_t u = 0; u <= y_len_[b]; ++u)
        occ_[size_t(row(b, t, u))] = g * std::exp(alpha_in_[cell(b, t, u)] + beta_in_[cell(b, t, u)] - total);
  }
  // dx[edge] -= g * edge occupancy, for the blank edges or the label edges
  void scatter(int64_t b, bool labels) {
    const int64_t Tf = f_len_[b], Uy = y_len_[b];
    const float total = beta_in_[cell(b, 0, 0)], g = grad_[b];
    for (int64_t t = 0; t < Tf; ++t)
      for (int64_t u = 0; u <= Uy; ++u) {
        const int64_t r = row(b, t, u);
        const float a = alpha_in_[cell(b, t, u)];
        int64_t v = blank_;
        float next = kNegInf;   // beta after the edge (0 after the final blank)
        float next2 = kNegInf;  // fused, a label equal to blank: beta after the label edge, same element
        const bool label_is_blank = u < Uy && y(b, u) == blank_;
        if (labels) {
          if (u == Uy || (fused_ && label_is_blank)) continue;  // (the blank pass took it)
          v = y(b, u);
          next = beta_in_[cell(b, t, u + 1)];
        } else {
          if (t < Tf - 1) next = beta_in_[cell(b, t + 1, u)];
          else if (u == Uy) next = 0.0f;  // (no blank edge out of the last frame's inner cells)
          if (fused_ && label_is_blank) next2 = beta_in_[cell(b, t, u + 1)];
          if (next == kNegInf && next2 == kNegInf) continue;
        }
        if (next < next2) std::swap(next, next2);
        const float at = a + lp(r, v) - total, bc = beta_in_[cell(b, t, u)];
        float& d = dx32_[size_t(r * V_ + v)];
        // fused: g (occ p - edges) cancels; computed as g (exp(at + bc) - exp(at + next) -
        // exp(at + next2)) factored through expm1, as the kernel does
        if (fused_ && std::isfinite(at) && std::isfinite(bc) && std::isfinite(next) && !std::isnan(next2))
          d = g * (bc >= next ? -(std::exp(at + bc) * (std::expm1(next - bc) + std::exp(next2 - bc)))
                              : std::exp(at + next) * (std::expm1(bc - next) - std::exp(next2 - next)));
        else d -= g * (std::exp(at + next) + std::exp(at + next2));
      }
  }

  template <class F>
  void per_batch(F&& f) {
    opf::cpu::parallel_for(host_, B_, [&](int64_t b) { f(b); });
  }
  template <class F>
  void per_rows(F&& f) {
    opf::cpu::parallel_for(host_, threads_, [&](int64_t t) { f(rows_ * t / threads_, rows_ * (t + 1) / threads_); });
  }

  bool backward_, packed_ = false, fused_ = true;
  int threads_;
  const opf_host* host_;
  int64_t B_ = 0, T_ = 0, U1_ = 0, V_ = 0, rows_ = 0, blank_ = 0;
  DType dtype_ = DType::f32;
  const std::byte* x_ = nullptr;
  const int64_t *label_ = nullptr, *f_len_ = nullptr, *y_len_ = nullptr;
  const float *alpha_in_ = nullptr, *beta_in_ = nullptr, *grad_ = nullptr;
  std::vector<int64_t> start_;
  std::vector<float> lp_blank_, lp_label_, alpha_, beta_, loss_, occ_, dx32_;
  std::unique_ptr<float[]> prob_;
  std::vector<std::byte> dx_;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

}  // namespace

OPF_PEER_ADAPTER(unfused_transducer_loss, "unfused", "transducer_loss", unsupported, make);

}  // namespace opf::suites::peers::tloss_unfused
#endif  // HWY_ONCE
