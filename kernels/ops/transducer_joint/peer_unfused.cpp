// PyTorch eager's transducer joint as the unfused peer of transducer_joint (apex's Python
// reference path, one full pass per op over the [B, T, U, H] tensor):
//   forward:  h = f.unsqueeze(2) + g.unsqueeze(1);  relu: h = h.relu();
//             dropout: h = h * mask * scale (torch's dropout with the given mask, one pass)
//             unpacked: h.masked_fill_(dont_care, -1);  packed: h = h[valid] (a gather pass)
//   backward: unpacked: d = grad_h.masked_fill(dont_care, 0);  packed: d = zeros, d[valid] = grad_h
//             dropout: d = d * mask, the scale applied to grad_f / grad_g's f32 sums (the same
//             memory traffic as eager's d * mask * scale pass; eager's rounding of every scaled
//             element to T would fail the shared f16 / bf16 tolerance of the sums)
//             relu: d = threshold_backward(d, h_saved, 0)  (h_saved: the forward's relu output,
//             computed at setup, not timed: eager keeps it from the forward)
//             grad_f = d.sum(2);  grad_g = d.sum(1)
// f32 math, every pass rounding its output to T; sums in f32. Temporaries are allocated once
// (PyTorch's caching allocator reuses them). Threads: each pass splits its rows statically into
// `threads` slices. SIMD through Highway (dynamic dispatch).
#ifndef OPF_TRANSDUCER_JOINT_PEER_COMMON
#define OPF_TRANSDUCER_JOINT_PEER_COMMON
#include <algorithm>
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

namespace opf::suites::peers::transducer_joint_unfused {
enum class Op {
  add,        // x[b,t,u] = f[b,t] + g[b,u]            rows r of [B*T*U]
  relu,       // x[r] = relu(x[r])                      in place
  fill,       // x[r] = -1 where (t, u) is don't-care   (masked_fill_)
  pack,       // y_packed[row(r)] = x[r] for valid r    (boolean-mask gather)
  unpack,     // x[r] = valid ? y[row or r] : 0         (masked_fill / zeros + index_put)
  threshold,  // x[r] = !(z[r] <= 0) ? x[r] : 0         (relu backward on the saved output)
  dropout,    // x[r] *= mask ? scale : 0 for valid r   (mask in h's layout: packed rows when packed)
              // sum_u / sum_t: scale multiplies the f32 sums
  sum_u,      // out[b,t] = sum over u of x[b,t,u]      rows of [B*T]
  sum_t,      // out[b,u] = sum over t of x[b,t,u]      rows of [B*U]
};
struct Pass {
  Op op;
  int32_t dtype;
  void* x;
  const void* y;
  const void* z;
  int64_t r0, r1;
  int64_t nb, nt, nu, nh;
  const int32_t* fl;
  const int32_t* gl;
  const int64_t* base;  // packed: first row of batch b; null: unpacked
  const uint8_t* mask;  // dropout's keep mask (h's layout)
  float scale;          // dropout: a kept element's factor; sum_u / sum_t: the sums' factor
};
}  // namespace opf::suites::peers::transducer_joint_unfused
#endif  // OPF_TRANSDUCER_JOINT_PEER_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/transducer_joint/peer_unfused.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::suites::peers::transducer_joint_unfused::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;
using opf::cpu::from_f32;
using opf::cpu::to_f32;

template <class S>
void PassT(const Pass& p) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d), n = size_t(p.nh);
  const auto zero = hn::Zero(d);
  S* x = static_cast<S*>(p.x);
  const S* y = static_cast<const S*>(p.y);
  const S* z = static_cast<const S*>(p.z);
  auto valid = [&](int64_t r, int64_t& b) {
    b = r / (p.nt * p.nu);
    const int64_t t = r / p.nu % p.nt, u = r % p.nu;
    return t < p.fl[b] && u < p.gl[b];
  };
  auto packed_row = [&](int64_t r, int64_t b) {
    const int64_t t = r / p.nu % p.nt, u = r % p.nu;
    return p.base[b] + t * p.gl[b] + u;
  };
  std::vector<float> acc;  // sum_u / sum_t: one row's f32 sums
  for (int64_t r = p.r0; r < p.r1; ++r) {
    int64_t b = 0;
    switch (p.op) {
      case Op::add: {
        const int64_t bb = r / (p.nt * p.nu), t = r / p.nu % p.nt, u = r % p.nu;
        const S* fr = y + (bb * p.nt + t) * p.nh;
        const S* gr = z + (bb * p.nu + u) * p.nh;
        S* o = x + r * p.nh;
        size_t c = 0;
        for (; c + N <= n; c += N) StoreRound(d, hn::Add(LoadWiden(d, fr + c), LoadWiden(d, gr + c)), o + c);
        for (; c < n; ++c) o[c] = from_f32<S>(to_f32(fr[c]) + to_f32(gr[c]));
        break;
      }
      case Op::relu: {
        S* o = x + r * p.nh;
        size_t c = 0;
        for (; c + N <= n; c += N) {
          const auto v = LoadWiden(d, o + c);
          StoreRound(d, hn::IfThenZeroElse(hn::Lt(v, zero), v), o + c);
        }
        for (; c < n; ++c) o[c] = to_f32(o[c]) < 0.0f ? from_f32<S>(0.0f) : o[c];
        break;
      }
      case Op::fill:
        if (!valid(r, b))
          for (size_t c = 0; c < n; ++c) x[r * p.nh + int64_t(c)] = from_f32<S>(-1.0f);
        break;
      case Op::pack:
        if (valid(r, b)) std::memcpy(x + packed_row(r, b) * p.nh, y + r * p.nh, n * sizeof(S));
        break;
      case Op::unpack:
        if (valid(r, b)) std::memcpy(x + r * p.nh, y + (p.base ? packed_row(r, b) : r) * p.nh, n * sizeof(S));
        else std::fill(x + r * p.nh, x + (r + 1) * p.nh, from_f32<S>(0.0f));
        break;
      case Op::threshold: {
        S* o = x + r * p.nh;
        const S* s = z + r * p.nh;
        size_t c = 0;
        for (; c + N <= n; c += N)
          StoreRound(d, hn::IfThenZeroElse(hn::Le(LoadWiden(d, s + c), zero), LoadWiden(d, o + c)), o + c);
        for (; c < n; ++c)
          if (to_f32(s[c]) <= 0.0f) o[c] = from_f32<S>(0.0f);
        break;
      }
      case Op::dropout: {
        if (!valid(r, b)) break;  // don't-care rows: overwritten (forward) or zero (backward)
        S* o = x + r * p.nh;
        const uint8_t* m = p.mask + (p.base ? packed_row(r, b) : r) * p.nh;
        const hn::Rebind<uint8_t, decltype(d)> d8;
        const hn::RebindToUnsigned<decltype(d)> du;
        const auto vscale = hn::Set(d, p.scale);
        size_t c = 0;
        for (; c + N <= n; c += N) {
          const auto keep = hn::RebindMask(d, hn::Ne(hn::PromoteTo(du, hn::LoadU(d8, m + c)), hn::Zero(du)));
          StoreRound(d, hn::Mul(LoadWiden(d, o + c), hn::IfThenElseZero(keep, vscale)), o + c);
        }
        for (; c < n; ++c) o[c] = from_f32<S>(to_f32(o[c]) * (m[c] ? p.scale : 0.0f));
        break;
      }
      case Op::sum_u:
      case Op::sum_t: {
        // r: (b, t) for sum_u, (b, u) for sum_t; the summed index walks ascending
        const bool over_u = p.op == Op::sum_u;
        const int64_t inner = over_u ? p.nt : p.nu, bb = r / inner, k = r % inner;
        const int64_t len = over_u ? p.nu : p.nt;
        acc.assign(n, 0.0f);
        for (int64_t j = 0; j < len; ++j) {
          const int64_t t = over_u ? k : j, u = over_u ? j : k;
          const S* src = y + ((bb * p.nt + t) * p.nu + u) * p.nh;
          size_t c = 0;
          for (; c + N <= n; c += N)
            hn::StoreU(hn::Add(hn::LoadU(d, acc.data() + c), LoadWiden(d, src + c)), d, acc.data() + c);
          for (; c < n; ++c) acc[c] += to_f32(src[c]);
        }
        S* o = x + r * p.nh;
        const auto vscale = hn::Set(d, p.scale);
        size_t c = 0;
        for (; c + N <= n; c += N) StoreRound(d, hn::Mul(hn::LoadU(d, acc.data() + c), vscale), o + c);
        for (; c < n; ++c) o[c] = from_f32<S>(acc[c] * p.scale);
        break;
      }
    }
  }
}

void RunPass(const Pass& a) {
  opf::cpu::with_storage(a.dtype, [&](auto s) { PassT<decltype(s)>(a); });
}

}  // namespace opf::suites::peers::transducer_joint_unfused::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::suites::peers {
namespace transducer_joint_unfused {
HWY_EXPORT(RunPass);

std::string unsupported(const PeerCase& c) {
  if (c.shape.size() != 4) return "transducer_joint shapes are [B, T, U, H]";
  if (c.entry == "dropout_mask") return "dropout_mask: eager draws its mask with its own generator (other bits)";
  if (c.entry != "forward" && c.entry != "backward") return "transducer_joint has forward, backward and dropout_mask";
  return {};
}

class Run final : public PeerRun {
 public:
  Run(const PeerCase& c, const DrawnCase& drawn)
      : dt_(c.dtype),
        e_(dtype_size(c.dtype)),
        host_(host_threads(c.threads)),
        threads_(c.threads),
        forward_(c.entry == "forward"),
        relu_(c.params.flag("relu")),
        packed_(c.params.flag("packed")),
        drop_(c.params.get("dropout_prob") > 0),
        scale_(float(1.0 / (1.0 - c.params.get("dropout_prob")))) {
    for (const HostArg& h : drawn.host) {
      const std::string& name = h.desc->name;
      if (name == "f") f_ = h.bytes, nb_ = h.desc->shape[0], nt_ = h.desc->shape[1], nh_ = h.desc->shape[2];
      if (name == "g") g_ = h.bytes, nu_ = h.desc->shape[1];
      if (name == "grad_h") dh_ = h.bytes;
      if (name == "mask") mask_ = h.bytes;
      if (name == "f_len" || name == "g_len") {
        auto& v = name == "f_len" ? fl_ : gl_;
        v.resize(size_t(h.desc->numel()));
        std::memcpy(v.data(), h.bytes.data(), v.size() * sizeof(int32_t));
      }
    }
    base_.assign(size_t(nb_), 0);
    for (int64_t b = 1; b < nb_; ++b)
      base_[size_t(b)] = base_[size_t(b - 1)] + int64_t(fl_[size_t(b - 1)]) * gl_[size_t(b - 1)];
    const int64_t rows = nb_ ? base_.back() + int64_t(fl_.back()) * gl_.back() : 0;
    full_.resize(size_t(nb_ * nt_ * nu_ * nh_) * e_);
    if (forward_) {
      if (packed_) out_.resize(size_t(rows * nh_) * e_);
      return;
    }
    df_.resize(size_t(nb_ * nt_ * nh_) * e_);
    dg_.resize(size_t(nb_ * nu_ * nh_) * e_);
    if (relu_) {  // the forward's saved relu output
      saved_.resize(full_.size());
      pass(Op::add, saved_.data(), f_.data(), g_.data(), nb_ * nt_ * nu_);
      pass(Op::relu, saved_.data(), nullptr, nullptr, nb_ * nt_ * nu_);
    }
  }

  void run() override {
    const int64_t rows = nb_ * nt_ * nu_;
    if (forward_) {
      pass(Op::add, full_.data(), f_.data(), g_.data(), rows);
      if (relu_) pass(Op::relu, full_.data(), nullptr, nullptr, rows);
      if (drop_) pass(Op::dropout, full_.data(), nullptr, nullptr, rows, scale_);
      if (packed_) pass(Op::pack, out_.data(), full_.data(), nullptr, rows);
      else pass(Op::fill, full_.data(), nullptr, nullptr, rows);
      return;
    }
    pass(Op::unpack, full_.data(), dh_.data(), nullptr, rows);
    if (drop_) pass(Op::dropout, full_.data(), nullptr, nullptr, rows, 1.0f);
    if (relu_) pass(Op::threshold, full_.data(), nullptr, saved_.data(), rows);
    const float sum_scale = drop_ ? scale_ : 1.0f;
    pass(Op::sum_u, df_.data(), full_.data(), nullptr, nb_ * nt_, sum_scale);
    pass(Op::sum_t, dg_.data(), full_.data(), nullptr, nb_ * nu_, sum_scale);
  }

  bool output(std::string_view name, std::vector<double>& out) const override {
    const std::vector<std::byte>* src = nullptr;
    if (forward_ && name == "h") src = packed_ ? &out_ : &full_;
    if (!forward_ && name == "grad_f") src = &df_;
    if (!forward_ && name == "grad_g") src = &dg_;
    if (!src) return false;
    out.resize(src->size() / e_);
    for (size_t i = 0; i < out.size(); ++i) out[i] = load_element(dt_, src->data(), int64_t(i));
    return true;
  }

 private:
  // One pass over `rows` rows, thread t taking rows [rows t / threads, rows (t+1) / threads).
  void pass(Op op, void* x, const void* y, const void* z, int64_t rows, float scale = 1.0f) {
    const int slices = std::max(threads_, 1);
    opf::cpu::parallel_for(host_, slices, [&](int64_t t) {
      const Pass p{op,
                   int32_t(dt_),
                   x,
                   y,
                   z,
                   rows * t / slices,
                   rows * (t + 1) / slices,
                   nb_,
                   nt_,
                   nu_,
                   nh_,
                   fl_.data(),
                   gl_.data(),
                   packed_ ? base_.data() : nullptr,
                   reinterpret_cast<const uint8_t*>(mask_.data()),
                   scale};
      if (p.r1 > p.r0) HWY_DYNAMIC_DISPATCH(RunPass)(p);
    });
  }

  DType dt_;
  size_t e_;
  const opf_host* host_;
  int threads_;
  bool forward_, relu_, packed_, drop_;
  float scale_;
  int64_t nb_ = 0, nt_ = 0, nu_ = 0, nh_ = 0;
  std::vector<std::byte> f_, g_, dh_, mask_, full_, out_, saved_, df_, dg_;
  std::vector<int32_t> fl_, gl_;
  std::vector<int64_t> base_;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

}  // namespace transducer_joint_unfused

OPF_PEER_ADAPTER(unfused_transducer_joint, "unfused", "transducer_joint", transducer_joint_unfused::unsupported,
                 transducer_joint_unfused::make);

}  // namespace opf::suites::peers
#endif  // HWY_ONCE
