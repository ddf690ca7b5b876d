// fused_rope's `unfused` peer: what PyTorch eager runs for the unfused RoPE (Megatron / TE's
// apply_rotary_pos_emb without the fused kernel):
//   cos_, sin_ = cos(freqs).to(T), sin(freqs).to(T)         (cached entries: given)
//   t_rot, t_pass = t[..., :d2], t[..., d2:]
//   x1, x2 = t_rot.chunk(2, -1); rot = cat(-x2, x1)           (rotate_half)
//   out = cat(t_rot * cos_ + rot * sin_, t_pass)
// and its autograd backward, dt = cat(dy_rot * cos_ + rotate_half^T(dy_rot * sin_), dy_pass) with
// rotate_half^T(g) = cat(g2, -g1): one whole-tensor pass per op (mul, neg, cat, mul, add, cat),
// each vectorised. Intermediates in f32 (so that the peer is judged with our tolerance; eager's
// 16-bit intermediates would move fewer bytes but round at every step); the result rounded to T.
// Per-element expressions match the fused op's (a*c + (-b)*s == a*c - b*s exactly), so the
// comparison measures the fusion. Packed thd: eager has no packed form (a Python loop over
// sequences), so the thd entries are not run here. 2-D (image) entries: eager's
//   t1, t2 = t.chunk(2, -1); out = cat(rope(t1, cos_h[y], sin_h[y]), rope(t2, cos_w[x], sin_w[x]))
// as the same six passes over each half (row stride d, width d / 2), each half's result written
// straight into its columns of out (eager's final cat, one more copy pass, is left out).
// Threads: the PeerCase's count; rows split statically, one block per thread.
#ifndef OPF_ROPE_PEER_UNFUSED_COMMON
#define OPF_ROPE_PEER_UNFUSED_COMMON
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

namespace opf::suites::peers::rope_unfused {
// One pass over rows [r0, r1) of R = s * b * h rows of d (position of row r: r / bh).
struct Pass {
  int32_t dtype;
  int64_t r0, r1, bh, d, d2;
  int64_t ld;        // row stride of in/out (d, or the 2-D entries' full head dim)
  int64_t s, img_w;  // 2-D (img_w > 0): token k = (r / bh) % s at image row k / img_w, column k % img_w
  int axis;          // 2-D: 0 = table row by image row (cos_h), 1 = by column (cos_w)
  const void* in;    // t or grad_out [R, d], T
  const float* cs;   // [s, d2], T values
  const float* sn;
  float* a;    // [R, d2]  in_rot * cos
  float* b;    // [R, d2]  forward: rot * sin; backward: in_rot * sin
  float* neg;  // [R, H]
  float* rot;  // [R, d2]
  float* sum;  // [R, d2]
  void* out;   // [R, d], T
};
}  // namespace opf::suites::peers::rope_unfused
#endif  // OPF_ROPE_PEER_UNFUSED_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/fused_rope/peer_unfused.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::suites::peers::rope_unfused::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;
using opf::cpu::from_f32;
using opf::cpu::to_f32;
using DF = hn::ScalableTag<float>;

// Row r's table row: its position (sbhd), or its image row / column (2-D).
HWY_INLINE int64_t TableRowOf(const Pass& p, int64_t r) {
  if (p.img_w == 0) return r / p.bh;
  const int64_t k = (r / p.bh) % p.s;
  return p.axis == 0 ? k / p.img_w : k % p.img_w;
}

// dst[r] = in[r, :d2] * tab[pos(r)]   (tab: cos or sin)
template <class S>
void MulTableT(const Pass& p, const float* tab, float* dst) {
  const DF d;
  const size_t N = hn::Lanes(d), w = size_t(p.d2);
  for (int64_t r = p.r0; r < p.r1; ++r) {
    const S* x = static_cast<const S*>(p.in) + r * p.ld;
    const float* c = tab + TableRowOf(p, r) * p.d2;
    float* y = dst + r * p.d2;
    size_t j = 0;
    for (; j + N <= w; j += N) hn::StoreU(hn::Mul(LoadWiden(d, x + j), hn::LoadU(d, c + j)), d, y + j);
    for (; j < w; ++j) y[j] = to_f32(x[j]) * c[j];
  }
}
template <class S>
void MulCosT(const Pass& p) {
  MulTableT<S>(p, p.cs, p.a);
}
template <class S>
void MulSinT(const Pass& p) {
  MulTableT<S>(p, p.sn, p.b);
}

// neg[r] = -src[r, off : off + H], src of storage S with row length `len`
template <class S>
HWY_INLINE void NegRows(const Pass& p, const S* src, int64_t len, int64_t off) {
  const DF d;
  const size_t N = hn::Lanes(d), h = size_t(p.d2 / 2);
  for (int64_t r = p.r0; r < p.r1; ++r) {
    const S* x = src + r * len + off;
    float* y = p.neg + r * int64_t(h);
    size_t j = 0;
    for (; j + N <= h; j += N) hn::StoreU(hn::Neg(LoadWiden(d, x + j)), d, y + j);
    for (; j < h; ++j) y[j] = -to_f32(x[j]);
  }
}
template <class S>
void NegHiT(const Pass& p) {  // forward: -x2
  NegRows<S>(p, static_cast<const S*>(p.in), p.ld, p.d2 / 2);
}
void NegLo(const Pass& p) {  // backward: -g1 of g = in_rot * sin
  NegRows<float>(p, p.b, p.d2, 0);
}

// rot[r] = cat(first[r], second[r]), halves of H
template <class S1, class S2>
HWY_INLINE void CatHalves(const Pass& p, const S1* first, int64_t len1, int64_t off1, const S2* second, int64_t len2,
                          int64_t off2) {
  const DF d;
  const size_t N = hn::Lanes(d), h = size_t(p.d2 / 2);
  for (int64_t r = p.r0; r < p.r1; ++r) {
    float* y = p.rot + r * p.d2;
    const S1* x1 = first + r * len1 + off1;
    const S2* x2 = second + r * len2 + off2;
    size_t j = 0;
    for (; j + N <= h; j += N) hn::StoreU(LoadWiden(d, x1 + j), d, y + j);
    for (; j < h; ++j) y[j] = to_f32(x1[j]);
    for (j = 0; j + N <= h; j += N) hn::StoreU(LoadWiden(d, x2 + j), d, y + h + j);
    for (; j < h; ++j) y[h + j] = to_f32(x2[j]);
  }
}
template <class S>
void CatFwdT(const Pass& p) {  // cat(-x2, x1)
  CatHalves<float, S>(p, p.neg, p.d2 / 2, 0, static_cast<const S*>(p.in), p.ld, 0);
}
void CatBwd(const Pass& p) {  // cat(g2, -g1)
  CatHalves<float, float>(p, p.b, p.d2, p.d2 / 2, p.neg, p.d2 / 2, 0);
}

// forward: b = rot * sin
void MulRotSin(const Pass& p) {
  const DF d;
  const size_t N = hn::Lanes(d), w = size_t(p.d2);
  for (int64_t r = p.r0; r < p.r1; ++r) {
    const float *x = p.rot + r * p.d2, *c = p.sn + TableRowOf(p, r) * p.d2;
    float* y = p.b + r * p.d2;
    size_t j = 0;
    for (; j + N <= w; j += N) hn::StoreU(hn::Mul(hn::LoadU(d, x + j), hn::LoadU(d, c + j)), d, y + j);
    for (; j < w; ++j) y[j] = x[j] * c[j];
  }
}

// sum = a + second (forward: b; backward: rot)
HWY_INLINE void AddRows(const Pass& p, const float* second) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const int64_t n0 = p.r0 * p.d2, n1 = p.r1 * p.d2;
  int64_t k = n0;
  for (; k + int64_t(N) <= n1; k += int64_t(N))
    hn::StoreU(hn::Add(hn::LoadU(d, p.a + k), hn::LoadU(d, second + k)), d, p.sum + k);
  for (; k < n1; ++k) p.sum[k] = p.a[k] + second[k];
}
void AddFwd(const Pass& p) { AddRows(p, p.b); }
void AddBwd(const Pass& p) { AddRows(p, p.rot); }

// out = cat(sum, in[:, d2:]) (T)
template <class S>
void CatOutT(const Pass& p) {
  const DF d;
  const size_t N = hn::Lanes(d), w = size_t(p.d2), dd = size_t(p.d);
  for (int64_t r = p.r0; r < p.r1; ++r) {
    const float* x = p.sum + r * p.d2;
    const S* t = static_cast<const S*>(p.in) + r * p.ld;
    S* y = static_cast<S*>(p.out) + r * p.ld;
    size_t j = 0;
    for (; j + N <= w; j += N) StoreRound(d, hn::LoadU(d, x + j), y + j);
    for (; j < w; ++j) y[j] = from_f32<S>(x[j]);
    std::memcpy(y + w, t + w, (dd - w) * sizeof(S));
  }
}

#define OPF_ROPE_PEER_STORAGE(Name)                                            \
  void Name(const Pass& p) {                                                   \
    opf::cpu::with_storage(p.dtype, [&](auto s) { Name##T<decltype(s)>(p); }); \
  }
OPF_ROPE_PEER_STORAGE(MulCos)
OPF_ROPE_PEER_STORAGE(MulSin)
OPF_ROPE_PEER_STORAGE(NegHi)
OPF_ROPE_PEER_STORAGE(CatFwd)
OPF_ROPE_PEER_STORAGE(CatOut)
#undef OPF_ROPE_PEER_STORAGE

}  // namespace opf::suites::peers::rope_unfused::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::suites::peers::rope_unfused {
HWY_EXPORT(MulCos);
HWY_EXPORT(MulSin);
HWY_EXPORT(NegHi);
HWY_EXPORT(NegLo);
HWY_EXPORT(CatFwd);
HWY_EXPORT(CatBwd);
HWY_EXPORT(MulRotSin);
HWY_EXPORT(AddFwd);
HWY_EXPORT(AddBwd);
HWY_EXPORT(CatOut);

namespace {

std::string unsupported(const PeerCase& c) {
  if (c.shape.size() != 5) return "fused_rope shapes are [s, b, h, d, d2]";
  if (c.entry.ends_with("_thd")) return "eager has no packed thd form (a Python loop over sequences)";
  if (c.dtype != DType::f32 && c.dtype != DType::f16 && c.dtype != DType::bf16) return "f32, f16 and bf16 only";
  if (c.entry.find("_2d") != std::string_view::npos && c.shape[3] % 4 != 0) return "2-D entries need d divisible by 4";
  return {};
}

const HostArg& arg(const DrawnCase& d, std::string_view name) {
  for (const HostArg& h : d.host)
    if (h.desc->name == name) return h;
  throw std::runtime_error("fused_rope case has no argument '" + std::string(name) + "'");
}

float round_to(DType t, float v) {
  if (t == DType::f16) return f16_to_f32(f32_to_f16(v));
  if (t == DType::bf16) return bf16_to_f32(f32_to_bf16(v));
  return v;
}

// The six passes of one rotate-half over the rows of p (width p.d2; CatOut copies the pass-through columns).
template <class F>
void rope_passes(bool backward, F&& rows) {
  if (!backward) {
    rows([](const Pass& p) { HWY_DYNAMIC_DISPATCH(MulCos)(p); });
    rows([](const Pass& p) { HWY_DYNAMIC_DISPATCH(NegHi)(p); });
    rows([](const Pass& p) { HWY_DYNAMIC_DISPATCH(CatFwd)(p); });
    rows([](const Pass& p) { HWY_DYNAMIC_DISPATCH(MulRotSin)(p); });
    rows([](const Pass& p) { HWY_DYNAMIC_DISPATCH(AddFwd)(p); });
    rows([](const Pass& p) { HWY_DYNAMIC_DISPATCH(CatOut)(p); });
  } else {
    rows([](const Pass& p) { HWY_DYNAMIC_DISPATCH(MulCos)(p); });
    rows([](const Pass& p) { HWY_DYNAMIC_DISPATCH(MulSin)(p); });
    rows([](const Pass& p) { HWY_DYNAMIC_DISPATCH(NegLo)(p); });
    rows([](const Pass& p) { HWY_DYNAMIC_DISPATCH(CatBwd)(p); });
    rows([](const Pass& p) { HWY_DYNAMIC_DISPATCH(AddBwd)(p); });
    rows([](const Pass& p) { HWY_DYNAMIC_DISPATCH(CatOut)(p); });
  }
}

class Run final : public PeerRun {
 public:
  Run(const PeerCase& c, const DrawnCase& drawn)
      : backward_(c.entry.starts_with("backward")),
        cached_(c.entry.find("_cached") != std::string_view::npos),
        threads_(std::max(1, c.threads)),
        host_(host_threads(threads_)),
        dtype_(c.dtype),
        s_(c.shape[0]),
        rows_(c.shape[0] * c.shape[1] * c.shape[2]),
        d_(c.shape[3]),
        d2_(c.shape[4]) {
    const size_t rd2 = size_t(rows_ * d2_), sd2 = size_t(s_ * d2_);
    cs_.resize(sd2);
    sn_.resize(sd2);
    if (cached_) {  // eager's cached cos_/sin_ are just tensors: read as given
      const HostArg &cs = arg(drawn, "cos"), &sn = arg(drawn, "sin");
      for (size_t k = 0; k < sd2; ++k) {
        cs_[k] = float(load_element(cs.desc->dtype, cs.bytes.data(), int64_t(k)));
        sn_[k] = float(load_element(sn.desc->dtype, sn.bytes.data(), int64_t(k)));
      }
    } else {
      freqs_ = reinterpret_cast<const float*>(arg(drawn, "freqs").bytes.data());
    }
    a_.reset(new float[rd2]);
    b_.reset(new float[rd2]);
    neg_.reset(new float[rd2 / 2 + 1]);
    rot_.reset(new float[rd2]);
    sum_.reset(new float[rd2]);
    out_.resize(size_t(rows_ * d_) * dtype_size(dtype_));
    base_ = Pass{int32_t(dtype_),
                 0,
                 0,
                 c.shape[1] * c.shape[2],
                 d_,
                 d2_,
                 d_,
                 0,
                 0,
                 0,
                 arg(drawn, backward_ ? "grad_out" : "t").bytes.data(),
                 cs_.data(),
                 sn_.data(),
                 a_.get(),
                 b_.get(),
                 neg_.get(),
                 rot_.get(),
                 sum_.get(),
                 out_.data()};
  }

  void run() override {
    if (!cached_)  // torch.cos(freqs).to(T), torch.sin(freqs).to(T): two small passes
      for (size_t k = 0; k < cs_.size(); ++k) {
        cs_[k] = round_to(dtype_, std::cos(freqs_[k]));
        sn_[k] = round_to(dtype_, std::sin(freqs_[k]));
      }
    rope_passes(backward_, [&](auto f) { rows(f); });
  }

  bool output(std::string_view name, std::vector<double>& out) const override {
    if (name != (backward_ ? "grad_t" : "out")) return false;
    out.resize(size_t(rows_ * d_));
    for (int64_t i = 0; i < rows_ * d_; ++i) out[size_t(i)] = load_element(dtype_, out_.data(), i);
    return true;
  }

 private:
  // One whole-tensor pass over the rows, cut statically into one block per thread.
  template <class F>
  void rows(F&& f) {
    opf::cpu::parallel_for(host_, threads_, [&](int64_t t) {
      Pass p = base_;
      p.r0 = rows_ * t / threads_;
      p.r1 = rows_ * (t + 1) / threads_;
      f(p);
    });
  }

  bool backward_, cached_;
  int threads_;
  const opf_host* host_;
  DType dtype_;
  int64_t s_, rows_, d_, d2_;
  const float* freqs_ = nullptr;
  Pass base_{};
  std::vector<float> cs_, sn_;
  std::unique_ptr<float[]> a_, b_, neg_, rot_, sum_;
  std::vector<std::byte> out_;
};

// 2-D entries: t [b, s, h, d] (dense, as drawn); each half of d is a rotate-half of q = d / 2
// columns at row stride d, with cos_h/sin_h by image row, then cos_w/sin_w by column.
class Run2d final : public PeerRun {
 public:
  Run2d(const PeerCase& c, const DrawnCase& drawn)
      : backward_(c.entry.starts_with("backward")),
        threads_(std::max(1, c.threads)),
        host_(host_threads(threads_)),
        dtype_(c.dtype) {
    const HostArg& t = arg(drawn, backward_ ? "grad_out" : "t");
    const Shape& sh = t.desc->shape;  // [b, s, h, d]
    rows_ = sh[0] * sh[1] * sh[2];
    d_ = sh[3];
    const int64_t q = d_ / 2, pw = int64_t(drawn.params.get("img_w"));
    static const char* const names[4] = {"cos_h", "sin_h", "cos_w", "sin_w"};
    for (int k = 0; k < 4; ++k) {  // eager's tables are tensors used as given
      const HostArg& a = arg(drawn, names[k]);
      tab_[k].resize(size_t(a.desc->shape[1] * q));
      for (size_t i = 0; i < tab_[k].size(); ++i)
        tab_[k][i] = float(load_element(a.desc->dtype, a.bytes.data(), int64_t(i)));
    }
    const int64_t img_w = pw ? pw : arg(drawn, "cos_w").desc->shape[1];
    const size_t rq = size_t(rows_ * q);
    a_.reset(new float[rq]);
    b_.reset(new float[rq]);
    neg_.reset(new float[rq / 2 + 1]);
    rot_.reset(new float[rq]);
    sum_.reset(new float[rq]);
    out_.resize(size_t(rows_ * d_) * dtype_size(dtype_));
    base_ =
        Pass{int32_t(dtype_), 0,       0,       sh[2],    q,        q,          d_,         sh[1],      img_w,      0,
             t.bytes.data(),  nullptr, nullptr, a_.get(), b_.get(), neg_.get(), rot_.get(), sum_.get(), out_.data()};
  }

  void run() override {
    const size_t half_bytes = size_t(d_ / 2) * dtype_size(dtype_);
    for (int axis = 0; axis < 2; ++axis) {  // t1 with the h tables, then t2 with the w tables
      Pass p = base_;
      p.axis = axis;
      p.cs = tab_[2 * axis].data();
      p.sn = tab_[2 * axis + 1].data();
      p.in = static_cast<const std::byte*>(p.in) + axis * half_bytes;
      p.out = static_cast<std::byte*>(p.out) + axis * half_bytes;
      rope_passes(backward_, [&](auto f) {
        opf::cpu::parallel_for(host_, threads_, [&](int64_t th) {
          Pass part = p;
          part.r0 = rows_ * th / threads_;
          part.r1 = rows_ * (th + 1) / threads_;
          f(part);
        });
      });
    }
  }

  bool output(std::string_view name, std::vector<double>& out) const override {
    if (name != (backward_ ? "grad_t" : "out")) return false;
    out.resize(size_t(rows_ * d_));
    for (int64_t i = 0; i < rows_ * d_; ++i) out[size_t(i)] = load_element(dtype_, out_.data(), i);
    return true;
  }

 private:
  bool backward_;
  int threads_;
  const opf_host* host_;
  DType dtype_;
  int64_t rows_ = 0, d_ = 0;
  Pass base_{};
  std::vector<float> tab_[4];
  std::unique_ptr<float[]> a_, b_, neg_, rot_, sum_;
  std::vector<std::byte> out_;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) {
  if (c.entry.find("_2d") != std::string_view::npos) return std::make_unique<Run2d>(c, drawn);
  return std::make_unique<Run>(c, drawn);
}

}  // namespace

OPF_PEER_ADAPTER(unfused_fused_rope, "unfused", "fused_rope", unsupported, make);

}  // namespace opf::suites::peers::rope_unfused
#endif  // HWY_ONCE
