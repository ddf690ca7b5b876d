// syncbn's `unfused` peer: what PyTorch eager runs for the NCHW entries, one whole-tensor pass per
// op, f32 only:
//   welford:        mean = x.mean((0, 2)) (one pass), var = ((x - mean)^2).mean((0, 2)) (a second
//                   pass; eager also writes x - mean and its square, here kept in registers: a
//                   generous peer).
//   forward:        t = x - mean; t = t * invstd; t = t * weight; y = t + bias   (four passes)
//   backward_elemt: t = x - mean; t = t * (invstd^2 sum_dy_xmu / n); u = dy - sum_dy / n;
//                   u = u - t; dx = u * (weight invstd)                          (five passes)
// Plain loops the compiler vectorises; channels split statically, one block per thread.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/parallel.h"
#include "opforge/threads.h"
#include "peers/peer.h"

namespace opf::suites::peers::syncbn_unfused {
namespace {

std::string unsupported(const PeerCase& c) {
  if (c.shape.size() != 3) return "syncbn shapes are [N, C, HW]";
  if (c.dtype != DType::f32) return "f32 only (eager's f16/bf16 passes round at every step)";
  if (c.entry != "welford" && c.entry != "forward" && c.entry != "backward_elemt")
    return "NCHW welford, forward and backward_elemt only";
  return {};
}

const float* arg(const DrawnCase& d, std::string_view name) {
  for (const HostArg& h : d.host)
    if (h.desc->name == name) return reinterpret_cast<const float*>(h.bytes.data());
  throw std::runtime_error("syncbn case has no argument '" + std::string(name) + "'");
}

class Run final : public PeerRun {
 public:
  Run(const PeerCase& c, const DrawnCase& d)
      : entry_(c.entry), threads_(std::max(1, c.threads)), host_(host_threads(threads_)), n_(c.shape[0]),
        ch_(c.shape[1]), hw_(c.shape[2]) {
    const size_t el = size_t(n_ * ch_ * hw_);
    x_ = arg(d, "x");
    if (entry_ == "welford") {
      mean_.resize(size_t(ch_));
      var_.resize(size_t(ch_));
      return;
    }
    m_ = arg(d, "mean");
    is_ = arg(d, "invstd");
    w_ = arg(d, "weight");
    t_.reset(new float[el]);
    out_.reset(new float[el]);
    if (entry_ == "forward") {
      b_ = arg(d, "bias");
    } else {
      dy_ = arg(d, "dy");
      u_.reset(new float[el]);
      const float* sd = arg(d, "sum_dy");
      const float* sdx = arg(d, "sum_dy_xmu");
      const double n = arg(d, "count_all")[0];
      for (int64_t c = 0; c < ch_; ++c) {
        k1_.push_back(float(sd[c] / n));
        k2_.push_back(float(double(is_[c]) * is_[c] * sdx[c] / n));
        a_.push_back(w_[c] * is_[c]);
      }
    }
  }

  void run() override {
    const int64_t hw = hw_;
    if (entry_ == "welford") {
      channels([&](int64_t c) {
        double s = 0;
        for (int64_t i = 0; i < n_; ++i) {
          const float* p = x_ + (i * ch_ + c) * hw;
          float r = 0;
          for (int64_t j = 0; j < hw; ++j) r += p[j];
          s += r;
        }
        const float m = float(s / double(n_ * hw));
        double v = 0;
        for (int64_t i = 0; i < n_; ++i) {
          const float* p = x_ + (i * ch_ + c) * hw;
          float r = 0;
          for (int64_t j = 0; j < hw; ++j) r += (p[j] - m) * (p[j] - m);
          v += r;
        }
        mean_[size_t(c)] = m;
        var_[size_t(c)] = float(v / double(n_ * hw));
      });
      return;
    }
    float* t = t_.get();
    float* y = out_.get();
    auto pass = [&](auto&& f) {  // one elementwise pass over every (n, c) row
      channels([&](int64_t c) {
        for (int64_t i = 0; i < n_; ++i) f(c, (i * ch_ + c) * hw);
      });
    };
    pass([&](int64_t c, int64_t o) { for (int64_t j = 0; j < hw; ++j) t[o + j] = x_[o + j] - m_[c]; });
    if (entry_ == "forward") {
      pass([&](int64_t c, int64_t o) { for (int64_t j = 0; j < hw; ++j) t[o + j] = t[o + j] * is_[c]; });
      pass([&](int64_t c, int64_t o) { for (int64_t j = 0; j < hw; ++j) t[o + j] = t[o + j] * w_[c]; });
      pass([&](int64_t c, int64_t o) { for (int64_t j = 0; j < hw; ++j) y[o + j] = t[o + j] + b_[c]; });
      return;
    }
    float* u = u_.get();
    pass([&](int64_t c, int64_t o) { for (int64_t j = 0; j < hw; ++j) t[o + j] = t[o + j] * k2_[size_t(c)]; });
    pass([&](int64_t c, int64_t o) { for (int64_t j = 0; j < hw; ++j) u[o + j] = dy_[o + j] - k1_[size_t(c)]; });
    pass([&](int64_t, int64_t o) { for (int64_t j = 0; j < hw; ++j) u[o + j] = u[o + j] - t[o + j]; });
    pass([&](int64_t c, int64_t o) { for (int64_t j = 0; j < hw; ++j) y[o + j] = u[o + j] * a_[size_t(c)]; });
  }

  bool output(std::string_view name, std::vector<double>& out) const override {
    const size_t el = size_t(n_ * ch_ * hw_);
    if (entry_ == "welford" && (name == "mean" || name == "var_biased")) {
      const auto& v = name == "mean" ? mean_ : var_;
      out.assign(v.begin(), v.end());
      return true;
    }
    if ((entry_ == "forward" && name == "y") || (entry_ == "backward_elemt" && name == "dx")) {
      out.assign(out_.get(), out_.get() + el);
      return true;
    }
    return false;
  }

 private:
  template <class F>
  void channels(F&& f) {
    opf::cpu::parallel_for(host_, threads_, [&](int64_t t) {
      for (int64_t c = ch_ * t / threads_; c < ch_ * (t + 1) / threads_; ++c) f(c);
    });
  }

  std::string entry_;
  int threads_;
  const opf_host* host_;
  int64_t n_, ch_, hw_;
  const float *x_ = nullptr, *dy_ = nullptr, *m_ = nullptr, *is_ = nullptr, *w_ = nullptr, *b_ = nullptr;
  std::vector<float> mean_, var_, k1_, k2_, a_;
  std::unique_ptr<float[]> t_, u_, out_;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

}  // namespace

OPF_PEER_ADAPTER(unfused_syncbn, "unfused", "syncbn", unsupported, make);

}  // namespace opf::suites::peers::syncbn_unfused
