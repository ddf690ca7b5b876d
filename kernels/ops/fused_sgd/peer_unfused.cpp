// PyTorch eager's foreach SGD (torch.optim.SGD, foreach=True) as the unfused peer of fused_sgd:
// one full pass over the lists per elementwise op, as torch/optim/sgd.py's _multi_tensor_sgd
// issues them, preceded by the grad scaler's unscale when scale != 1:
//   scale != 1:            g = g * scale                 (a new list in T; AMP's unscale_)
//   wd != 0, before:       g = g + wd*p                  (torch._foreach_add(grads, params, alpha=wd))
//   momentum != 0:         first_run: buf = g            (torch.clone)
//                          else:      buf *= mu; buf += (1 - dampening)*g
//                          nesterov:  g = g + mu*buf     (a new list)   else g = buf
//   wd != 0, after:        g = g + wd*p                  (a new list; PyTorch has no such option,
//                                                         apex's wd_after_momentum as one more pass)
//   p += -lr*g
// f32 math, each pass rounding its output to its list's dtype (params and the grad temporaries in
// T, the buffer and its aliases in f32). Temporary lists are allocated once (PyTorch's caching
// allocator reuses them). Threads: each pass splits the lists' concatenated elements statically
// into `threads` slices, one barrier per pass (kinder to the peer than PyTorch's CPU foreach
// fallback, which goes tensor by tensor). SIMD through Highway (dynamic dispatch).
// PyTorch has no noop flag in this path: the peer reports params and momentum_buffer only.
#ifndef OPF_FUSED_SGD_PEER_COMMON
#define OPF_FUSED_SGD_PEER_COMMON
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

namespace opf::suites::peers::fused_sgd_unfused {
// x[j] = a*y[j] (+ s*z[j] when z): each operand is either the storage dtype S or f32.
struct Pass {
  int32_t dtype;  // S
  void* x;
  const void* y;
  const void* z;
  bool xf, yf, zf;  // operand is f32
  size_t n;
  float a, s;
};
}  // namespace opf::suites::peers::fused_sgd_unfused
#endif  // OPF_FUSED_SGD_PEER_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/fused_sgd/peer_unfused.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::suites::peers::fused_sgd_unfused::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;
using opf::cpu::from_f32;
using opf::cpu::to_f32;

template <class X, class Y, class Z>
void Axpby(const Pass& p) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  X* x = static_cast<X*>(p.x);
  const Y* y = static_cast<const Y*>(p.y);
  const Z* z = static_cast<const Z*>(p.z);
  const auto va = hn::Set(d, p.a), vs = hn::Set(d, p.s);
  const bool scaled = p.a != 1.0f;
  size_t j = 0;
  for (; j + N <= p.n; j += N) {
    auto r = LoadWiden(d, y + j);
    if (scaled) r = hn::Mul(va, r);
    if (z) r = hn::MulAdd(vs, LoadWiden(d, z + j), r);  // ATen's add(alpha): fmadd(b, alpha, a)
    StoreRound(d, r, x + j);
  }
  for (; j < p.n; ++j) {
    float r = to_f32(y[j]);
    if (scaled) r = p.a * r;
    if (z) r = std::fma(p.s, to_f32(z[j]), r);
    x[j] = from_f32<X>(r);
  }
}

template <class S>
void PassT(const Pass& p) {
  // operands of type S or f32: 8 combinations
  auto with = [](bool f, auto fn) {
    if (f) fn(float{});
    else fn(S{});
  };
  with(p.xf, [&](auto x) {
    with(p.yf, [&](auto y) { with(p.zf, [&](auto z) { Axpby<decltype(x), decltype(y), decltype(z)>(p); }); });
  });
}

void RunPass(const Pass& a) {
  opf::cpu::with_storage(a.dtype, [&](auto s) { PassT<decltype(s)>(a); });
}

}  // namespace opf::suites::peers::fused_sgd_unfused::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::suites::peers {
namespace fused_sgd_unfused {
HWY_EXPORT(RunPass);

std::string unsupported(const PeerCase& c) {
  if (c.shape.size() != 2) return "fused_sgd shapes are [list_length, max_numel]";
  if (c.entry != "step") return "PyTorch's SGD has no model-copy form: the peer runs step only";
  return {};
}

// A list of tensors, all of the storage dtype or all f32.
struct List {
  std::vector<std::byte*> t;
  bool f32 = false;
};

class Run final : public PeerRun {
 public:
  Run(const PeerCase& c, const DrawnCase& drawn)
      : dt_(c.dtype), e_(dtype_size(c.dtype)), host_(host_threads(c.threads)), threads_(c.threads), params_(c.params) {
    const auto elems = [&](std::string_view name) {
      std::vector<const HostArg*> v;
      for (const HostArg& h : drawn.host)
        if (h.desc->name == name) v.push_back(&h);
      return v;
    };
    const auto g = elems("grads"), p = elems("params"), b = elems("momentum_buffer");
    offsets_.push_back(0);
    for (size_t k = 0; k < g.size(); ++k) {
      offsets_.push_back(offsets_.back() + g[k]->desc->numel());
      g_store_.push_back(g[k]->bytes);
      p_store_.push_back(p[k]->bytes);
      b_store_.push_back(b[k]->bytes);
    }
    g_ = own(g_store_, false);
    p_ = own(p_store_, false);
    b_ = own(b_store_, true);
    // temporaries, only those run() uses: three in T, the last in f32 (its input may be buf)
    const bool wd = float(params_.get("weight_decay")) != 0, after = params_.flag("wd_after_momentum");
    const bool need[4] = {float(params_.get("scale")) != 1.0f, wd && !after,
                          float(params_.get("momentum")) != 0 && params_.flag("nesterov"), wd && after};
    for (int i = 0; i < 4; ++i) {
      if (!need[i]) continue;
      tmp_store_[i].resize(g.size());
      for (size_t k = 0; k < g.size(); ++k)
        tmp_store_[i][k].resize(size_t(offsets_[k + 1] - offsets_[k]) * (i == 3 ? 4 : e_));
      tmp_[i] = own(tmp_store_[i], i == 3);
    }
  }

  void run() override {
    const float lr = float(params_.get("lr")), mu = float(params_.get("momentum")),
                omd = float(1.0 - params_.get("dampening")), wd = float(params_.get("weight_decay")),
                scale = float(params_.get("scale"));
    const bool after = params_.flag("wd_after_momentum");
    const List* cur = &g_;
    if (scale != 1.0f) {
      pass(tmp_[0], *cur, nullptr, scale, 0);
      cur = &tmp_[0];
    }
    if (wd != 0 && !after) {
      pass(tmp_[1], *cur, &p_, 1, wd);
      cur = &tmp_[1];
    }
    if (mu != 0) {
      if (params_.flag("first_run")) {
        pass(b_, *cur, nullptr, 1, 0);
      } else {
        pass(b_, b_, nullptr, mu, 0);
        pass(b_, b_, cur, 1, omd);
      }
      if (params_.flag("nesterov")) {
        pass(tmp_[2], *cur, &b_, 1, mu);
        cur = &tmp_[2];
      } else {
        cur = &b_;
      }
    }
    if (wd != 0 && after) {
      pass(tmp_[3], *cur, &p_, 1, wd);
      cur = &tmp_[3];
    }
    pass(p_, p_, cur, 1, -lr);
  }

  bool output(std::string_view, std::vector<double>&) const override { return false; }  // no noop flag

  bool output(std::string_view name, int k, std::vector<double>& out) const override {
    if (k < 0 || size_t(k) + 1 >= offsets_.size()) return false;
    const size_t n = size_t(offsets_[size_t(k) + 1] - offsets_[size_t(k)]);
    out.resize(n);
    if (name == "params") {
      for (size_t i = 0; i < n; ++i) out[i] = load_element(dt_, p_store_[size_t(k)].data(), int64_t(i));
    } else if (name == "momentum_buffer") {
      for (size_t i = 0; i < n; ++i) out[i] = load_element(DType::f32, b_store_[size_t(k)].data(), int64_t(i));
    } else {
      return false;
    }
    return true;
  }

 private:
  static List own(std::vector<std::vector<std::byte>>& store, bool f32) {
    List l;
    l.f32 = f32;
    for (auto& v : store) l.t.push_back(v.data());
    return l;
  }

  // One full pass x = a*y (+ s*z): thread t takes elements [N t / threads, N (t+1) / threads) of
  // the concatenated lists.
  void pass(const List& x, const List& y, const List* z, float a, float s) {
    const int64_t total = offsets_.back();
    const int slices = std::max(threads_, 1);
    opf::cpu::parallel_for(host_, slices, [&](int64_t t) {
      const int64_t lo = total * t / slices, hi = total * (t + 1) / slices;
      size_t k = size_t(std::upper_bound(offsets_.begin(), offsets_.end(), lo) - offsets_.begin()) - 1;
      for (; k + 1 < offsets_.size() && offsets_[k] < hi; ++k) {
        const int64_t b = std::max(lo, offsets_[k]) - offsets_[k], end = std::min(hi, offsets_[k + 1]) - offsets_[k];
        if (end <= b) continue;
        auto at = [&](const List& l) { return l.t[k] + size_t(b) * (l.f32 ? 4 : e_); };
        const Pass p{int32_t(dt_),    at(x), at(y), z ? at(*z) : nullptr, x.f32, y.f32, z ? z->f32 : false,
                     size_t(end - b), a,     s};
        HWY_DYNAMIC_DISPATCH(RunPass)(p);
      }
    });
  }

  DType dt_;
  size_t e_;
  const opf_host* host_;
  int threads_;
  Params params_;
  std::vector<int64_t> offsets_;
  std::vector<std::vector<std::byte>> g_store_, p_store_, b_store_, tmp_store_[4];
  List g_, p_, b_, tmp_[4];
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

}  // namespace fused_sgd_unfused

OPF_PEER_ADAPTER(unfused_fused_sgd, "unfused", "fused_sgd", fused_sgd_unfused::unsupported, fused_sgd_unfused::make);

}  // namespace opf::suites::peers
#endif  // HWY_ONCE
