// syncbn's `unfused` peer: what PyTorch eager runs for the NCHW entries, one whole-tensor pass per
// op, f32 only:
//   welford:        mean = x.mean((0, 2)) (one pass), var = ((x - mean)^2).mean((0, 2)) (a second
//                   pass; eager also writes x - mean and its square, here kept in registers: a
//                   generous peer).
//   forward:        t = x - mean; t = t * invstd; t = t * weight; y = t + bias   (four passes)
//   backward_elemt: t = x - mean; t = t * (invstd^2 sum_dy_xmu / n); u = dy - sum_dy / n;
//                   u = u - t; dx = u * (weight invstd)                          (five passes)
// and for the channels-last residual + ReLU (BatchNorm, then `+ z`, then ReLU, as a ResNet block
// runs them in eager):
//   forward_c_last, forward_z_c_last: the forward's four passes on [M, C]; y = t + z (a fifth);
//                   y = relu(y) with fuse_relu (one more)
//   relu_backward[_z]_c_last: eager saves the ReLU's output y and runs threshold_backward:
//                   dy_masked = y <= 0 ? 0 : dy, one pass over dy and y (y is made, untimed, by
//                   the forward's passes when the run is set up: eager's saved tensor)
// Plain loops the compiler vectorises; channels (NCHW) or rows (channels last) split statically,
// one block per thread. Buffers are zeroed when the run is set up: a timed first call must not
// pay the page faults of fresh memory (eager's caching allocator hands out touched blocks).
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
  if (c.entry != "welford" && c.entry != "forward" && c.entry != "backward_elemt" && c.entry != "forward_c_last" &&
      c.entry != "forward_z_c_last" && c.entry != "relu_backward_c_last" && c.entry != "relu_backward_z_c_last")
    return "welford, forward, backward_elemt (NCHW) and the channels-last forwards and relu_backward only";
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
      : entry_(c.entry),
        threads_(std::max(1, c.threads)),
        host_(host_threads(threads_)),
        n_(c.shape[0]),
        ch_(c.shape[1]),
        hw_(c.shape[2]) {
    const size_t el = size_t(n_ * ch_ * hw_);
    x_ = arg(d, "x");
    if (entry_.ends_with("_c_last")) {
      last_ = true;
      rows_ = n_ * hw_;
      relu_ = entry_.starts_with("relu_backward") || c.params.flag("fuse_relu");
      if (entry_.ends_with("_z_c_last")) z_ = arg(d, "z");
      m_ = arg(d, "mean");
      is_ = arg(d, "invstd");
      w_ = arg(d, "weight");
      b_ = arg(d, "bias");
      t_.reset(new float[el]());
      out_.reset(new float[el]());
      if (entry_.starts_with("relu_backward")) {
        dy_ = arg(d, "dy");
        saved_.reset(new float[el]());
        forward_last(saved_.get());  // the ReLU output eager saved
      }
      return;
    }
    if (entry_ == "welford") {
      mean_.resize(size_t(ch_));
      var_.resize(size_t(ch_));
      return;
    }
    m_ = arg(d, "mean");
    is_ = arg(d, "invstd");
    w_ = arg(d, "weight");
    t_.reset(new float[el]());
    out_.reset(new float[el]());
    if (entry_ == "forward") {
      b_ = arg(d, "bias");
    } else {
      dy_ = arg(d, "dy");
      u_.reset(new float[el]());
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
    if (last_) {
      if (!entry_.starts_with("relu_backward")) return forward_last(out_.get());
      const float *y = saved_.get(), *dy = dy_;  // locals: a store through o cannot change them
      float* o = out_.get();
      const int64_t C = ch_;
      rows([&](int64_t r0, int64_t r1) {
        for (int64_t i = r0 * C; i < r1 * C; ++i) {
          const float g = dy[i];  // read unconditionally: a select the compiler vectorises
          o[i] = y[i] <= 0 ? 0.0f : g;
        }
      });
      return;
    }
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
    pass([&](int64_t c, int64_t o) {
      for (int64_t j = 0; j < hw; ++j) t[o + j] = x_[o + j] - m_[c];
    });
    if (entry_ == "forward") {
      pass([&](int64_t c, int64_t o) {
        for (int64_t j = 0; j < hw; ++j) t[o + j] = t[o + j] * is_[c];
      });
      pass([&](int64_t c, int64_t o) {
        for (int64_t j = 0; j < hw; ++j) t[o + j] = t[o + j] * w_[c];
      });
      pass([&](int64_t c, int64_t o) {
        for (int64_t j = 0; j < hw; ++j) y[o + j] = t[o + j] + b_[c];
      });
      return;
    }
    float* u = u_.get();
    pass([&](int64_t c, int64_t o) {
      for (int64_t j = 0; j < hw; ++j) t[o + j] = t[o + j] * k2_[size_t(c)];
    });
    pass([&](int64_t c, int64_t o) {
      for (int64_t j = 0; j < hw; ++j) u[o + j] = dy_[o + j] - k1_[size_t(c)];
    });
    pass([&](int64_t, int64_t o) {
      for (int64_t j = 0; j < hw; ++j) u[o + j] = u[o + j] - t[o + j];
    });
    pass([&](int64_t c, int64_t o) {
      for (int64_t j = 0; j < hw; ++j) y[o + j] = u[o + j] * a_[size_t(c)];
    });
  }

  bool output(std::string_view name, std::vector<double>& out) const override {
    const size_t el = size_t(n_ * ch_ * hw_);
    if (entry_ == "welford" && (name == "mean" || name == "var_biased")) {
      const auto& v = name == "mean" ? mean_ : var_;
      out.assign(v.begin(), v.end());
      return true;
    }
    if ((entry_.starts_with("forward") && name == "y") || (entry_ == "backward_elemt" && name == "dx") ||
        (entry_.starts_with("relu_backward") && name == "dy_masked")) {
      out.assign(out_.get(), out_.get() + el);
      return true;
    }
    return false;
  }

 private:
  // channels last: BatchNorm's four passes over [rows_, ch_], + z, ReLU, each a pass of its own
  void forward_last(float* y) {
    float* t = t_.get();
    const int64_t C = ch_;
    const float *m = m_, *is = is_, *w = w_, *b = b_, *x = x_, *z = z_;
    const bool tail = z || relu_;  // the last BatchNorm pass writes t when more passes follow
    float* bn = tail ? t : y;
    rows([&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = 0; c < C; ++c) t[r * C + c] = x[r * C + c] - m[c];
    });
    rows([&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = 0; c < C; ++c) t[r * C + c] = t[r * C + c] * is[c];
    });
    rows([&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = 0; c < C; ++c) t[r * C + c] = t[r * C + c] * w[c];
    });
    rows([&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = 0; c < C; ++c) bn[r * C + c] = t[r * C + c] + b[c];
    });
    if (z) {
      float* dst = relu_ ? t : y;
      rows([&](int64_t r0, int64_t r1) {
        for (int64_t i = r0 * C; i < r1 * C; ++i) dst[i] = t[i] + z[i];
      });
    }
    if (relu_) {
      rows([&](int64_t r0, int64_t r1) {
        for (int64_t i = r0 * C; i < r1 * C; ++i) y[i] = t[i] <= 0 ? 0.0f : t[i];
      });
    }
  }

  template <class F>
  void rows(F&& f) {
    opf::cpu::parallel_for(host_, threads_, [&](int64_t t) { f(rows_ * t / threads_, rows_ * (t + 1) / threads_); });
  }

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
  bool last_ = false, relu_ = false;
  int64_t rows_ = 0;
  const float* z_ = nullptr;
  std::unique_ptr<float[]> saved_;
  const float *x_ = nullptr, *dy_ = nullptr, *m_ = nullptr, *is_ = nullptr, *w_ = nullptr, *b_ = nullptr;
  std::vector<float> mean_, var_, k1_, k2_, a_;
  std::unique_ptr<float[]> t_, u_, out_;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

}  // namespace

OPF_PEER_ADAPTER(unfused_syncbn, "unfused", "syncbn", unsupported, make);

}  // namespace opf::suites::peers::syncbn_unfused
