// fused_dense's `openblas` peer: what a framework on OpenBLAS runs without epilogue fusion —
// one whole-matrix cblas_sgemm per GEMM (OpenBLAS's own threads, the benchmark's count) and one
// separate whole-tensor pass per elementwise step (bias add, GELU, GELU', each bias gradient's
// column sum), each pass vectorised and split over the same thread count. GELU through the same
// exp (cpu/exp-inl.h) and sigmoid form as ours, so that a ratio measures the fusion, not the exp.
// f32 only (OpenBLAS has no f16 GEMM).
#ifndef OPF_DENSE_PEER_OPENBLAS_COMMON
#define OPF_DENSE_PEER_OPENBLAS_COMMON
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/parallel.h"
#include "opforge/threads.h"
#include "peers/peer.h"

namespace opf::suites::peers::dense_openblas {
// One elementwise pass over rows [r0, r1) (columns for ColSum) of a [rows, cols] f32 matrix.
struct Pass {
  int64_t r0, r1, rows, cols;
  float* m;          // the matrix (in place), or the source of ColSum
  const float* aux;  // the bias [cols]; h for DGelu
  float* out;        // ColSum: [cols]
};
}  // namespace opf::suites::peers::dense_openblas
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/fused_dense/peer_openblas.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::suites::peers::dense_openblas::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

struct Sig {
  VF s, t, h2;
};
HWY_INLINE Sig GeluSig(DF d, VF h) {
  const auto one = hn::Set(d, 1.0f), cap = hn::Set(d, 0x1p60f);
  auto h2 = hn::Mul(h, h);
  h2 = hn::IfThenElse(hn::Lt(h2, cap), h2, cap);
  const auto z2 =
      hn::Mul(hn::Set(d, 2.0f * 0.7978845608f), hn::Mul(h, hn::Add(one, hn::Mul(hn::Set(d, 0.044715f), h2))));
  const auto m = hn::Neg(hn::Abs(z2));
  const auto e = hn::IfThenZeroElse(hn::Lt(m, hn::Set(d, kExpFloor)), ExpClamped(d, m));
  const auto r = hn::Div(one, hn::Add(one, e)), er = hn::Mul(e, r);
  const auto neg = hn::Lt(z2, hn::Zero(d));
  return {hn::IfThenElse(neg, er, r), hn::IfThenElse(neg, r, er), h2};
}
float gelu1(float h) {
  return float(0.5 * h * (1 + std::tanh(0.7978845608028654 * (h + 0.044715 * double(h) * h * h))));
}
float dgelu1(float h) {
  const double hd = h, t = std::tanh(0.7978845608028654 * (hd + 0.044715 * hd * hd * hd));
  return float(0.5 * (1 + t) + 0.5 * hd * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * hd * hd));
}

// Calls vec(i) for whole vectors of the flat range [e0, e1), one(i) for the rest.
template <class V, class O>
HWY_INLINE void Flat(size_t e0, size_t e1, V&& vec, O&& one) {
  const size_t N = hn::Lanes(DF());
  size_t i = e0;
  for (; i + N <= e1; i += N) vec(i);
  for (; i < e1; ++i) one(i);
}

void AddBias(const Pass& p) {
  const DF d;
  const size_t N = hn::Lanes(d), c = size_t(p.cols);
  for (int64_t r = p.r0; r < p.r1; ++r) {
    float* row = p.m + r * p.cols;
    size_t j = 0;
    for (; j + N <= c; j += N) hn::StoreU(hn::Add(hn::LoadU(d, row + j), hn::LoadU(d, p.aux + j)), d, row + j);
    for (; j < c; ++j) row[j] += p.aux[j];
  }
}
// out (= m of the next pass) = GELU(m), written to p.out
void Gelu(const Pass& p) {
  const DF d;
  Flat(
      size_t(p.r0 * p.cols), size_t(p.r1 * p.cols),
      [&](size_t i) {
        const auto h = hn::LoadU(d, p.m + i);
        hn::StoreU(hn::Mul(h, GeluSig(d, h).s), d, p.out + i);
      },
      [&](size_t i) { p.out[i] = gelu1(p.m[i]); });
}
// m (dA) *= GELU'(aux = h), in place
void DGelu(const Pass& p) {
  const DF d;
  Flat(
      size_t(p.r0 * p.cols), size_t(p.r1 * p.cols),
      [&](size_t i) {
        const auto h = hn::LoadU(d, p.aux + i);
        const Sig g = GeluSig(d, h);
        const auto dz =
            hn::Mul(hn::Set(d, 0.7978845608f), hn::Add(hn::Set(d, 1.0f), hn::Mul(hn::Set(d, 3.0f * 0.044715f), g.h2)));
        const auto dg = hn::Add(g.s, hn::Mul(hn::Mul(hn::Mul(hn::Mul(g.s, g.t), dz), h), hn::Set(d, 2.0f)));
        hn::StoreU(hn::Mul(hn::LoadU(d, p.m + i), dg), d, p.m + i);
      },
      [&](size_t i) { p.m[i] *= dgelu1(p.aux[i]); });
}
// out[j] = Σ_rows m[:, j] for columns [r0, r1) (f32, as a framework's sum)
void ColSum(const Pass& p) {
  const DF d;
  const size_t N = hn::Lanes(d);
  std::fill(p.out + p.r0, p.out + p.r1, 0.0f);
  for (int64_t r = 0; r < p.rows; ++r) {
    const float* row = p.m + r * p.cols;
    size_t j = size_t(p.r0);
    for (; j + N <= size_t(p.r1); j += N)
      hn::StoreU(hn::Add(hn::LoadU(d, p.out + j), hn::LoadU(d, row + j)), d, p.out + j);
    for (; j < size_t(p.r1); ++j) p.out[j] += row[j];
  }
}

}  // namespace opf::suites::peers::dense_openblas::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::suites::peers::dense_openblas {
HWY_EXPORT(AddBias);
HWY_EXPORT(Gelu);
HWY_EXPORT(DGelu);
HWY_EXPORT(ColSum);

namespace {

std::string unsupported(const PeerCase& c) {
  if (c.shape.size() != 4) return "fused_dense shapes are [batch, in, hidden, out]";
  if (c.dtype != DType::f32) return "f32 only (OpenBLAS has no f16 GEMM)";
  return {};
}

std::vector<float> load(const DrawnCase& d, std::string_view name) {
  for (const HostArg& h : d.host)
    if (h.desc->name == name) {
      std::vector<float> v(size_t(h.desc->numel()));
      std::memcpy(v.data(), h.bytes.data(), v.size() * 4);
      return v;
    }
  throw std::runtime_error("fused_dense case has no argument '" + std::string(name) + "'");
}

// C [m, n] = op(A)·op(B), row-major, K = k
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
          float* c) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    std::fill(c, c + m * n, 0.0f);
    return;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k),
              1.0f, a, int(lda), b, int(ldb), 0.0f, c, int(n));
}

class Run final : public PeerRun {
 public:
  Run(const PeerCase& c, const DrawnCase& drawn)
      : entry_(c.entry),
        threads_(std::max(1, c.threads)),
        host_(host_threads(threads_)),
        b_(c.shape[0]),
        in_(c.shape[1]),
        hid_(c.shape[2]),
        out_(c.shape[3]) {
    x_ = load(drawn, "x");
    if (entry_ == "linear_bias_forward") {
      w1_ = load(drawn, "weight"), b1_ = load(drawn, "bias");
      set("y", b_ * hid_);
    } else if (entry_ == "linear_bias_backward") {
      w1_ = load(drawn, "weight"), dy_ = load(drawn, "dy");
      set("dx", b_ * in_), set("dweight", hid_ * in_), set("dbias", hid_);
    } else if (entry_ == "linear_gelu_linear_forward") {
      w1_ = load(drawn, "weight1"), b1_ = load(drawn, "bias1"), w2_ = load(drawn, "weight2"),
      b2_ = load(drawn, "bias2");
      set("h", b_ * hid_), set("a", b_ * hid_), set("y", b_ * out_);
    } else {
      w1_ = load(drawn, "weight1"), w2_ = load(drawn, "weight2"), dy_ = load(drawn, "dy");
      h_ = load(drawn, "h"), a_ = load(drawn, "a");
      set("dx", b_ * in_), set("dweight1", hid_ * in_), set("dbias1", hid_), set("dweight2", out_ * hid_),
          set("dbias2", out_), set("dh", b_ * hid_);
    }
  }

  void run() override {
    openblas_set_num_threads(threads_);
    if (entry_ == "linear_bias_forward") {
      float* y = out("y");
      gemm(false, true, b_, hid_, in_, x_.data(), in_, w1_.data(), in_, y);
      rows(b_, hid_, y, b1_.data(), nullptr, [](const Pass& p) { HWY_DYNAMIC_DISPATCH(AddBias)(p); });
    } else if (entry_ == "linear_bias_backward") {
      gemm(false, false, b_, in_, hid_, dy_.data(), hid_, w1_.data(), in_, out("dx"));
      gemm(true, false, hid_, in_, b_, dy_.data(), hid_, x_.data(), in_, out("dweight"));
      cols(b_, hid_, dy_.data(), out("dbias"));
    } else if (entry_ == "linear_gelu_linear_forward") {
      float *h = out("h"), *a = out("a"), *y = out("y");
      gemm(false, true, b_, hid_, in_, x_.data(), in_, w1_.data(), in_, h);
      rows(b_, hid_, h, b1_.data(), nullptr, [](const Pass& p) { HWY_DYNAMIC_DISPATCH(AddBias)(p); });
      rows(b_, hid_, h, nullptr, a, [](const Pass& p) { HWY_DYNAMIC_DISPATCH(Gelu)(p); });
      gemm(false, true, b_, out_, hid_, a, hid_, w2_.data(), hid_, y);
      rows(b_, out_, y, b2_.data(), nullptr, [](const Pass& p) { HWY_DYNAMIC_DISPATCH(AddBias)(p); });
    } else {
      float* dh = out("dh");
      gemm(true, false, out_, hid_, b_, dy_.data(), out_, a_.data(), hid_, out("dweight2"));
      cols(b_, out_, dy_.data(), out("dbias2"));
      gemm(false, false, b_, hid_, out_, dy_.data(), out_, w2_.data(), hid_, dh);
      rows(b_, hid_, dh, h_.data(), nullptr, [](const Pass& p) { HWY_DYNAMIC_DISPATCH(DGelu)(p); });
      cols(b_, hid_, dh, out("dbias1"));
      gemm(true, false, hid_, in_, b_, dh, hid_, x_.data(), in_, out("dweight1"));
      gemm(false, false, b_, in_, hid_, dh, hid_, w1_.data(), in_, out("dx"));
    }
  }

  bool output(std::string_view name, std::vector<double>& o) const override {
    for (const auto& [n, v] : outs_)
      if (n == name) {
        o.assign(v.begin(), v.end());
        return true;
      }
    return false;
  }

 private:
  void set(const std::string& name, int64_t n) { outs_.push_back({name, std::vector<float>(size_t(n))}); }
  float* out(std::string_view name) {
    for (auto& [n, v] : outs_)
      if (n == name) return v.data();
    return nullptr;
  }
  // One whole-tensor pass over [0, count) rows (columns for ColSum), one static block per thread.
  template <class F>
  void split(int64_t count, const Pass& base, F&& f) {
    opf::cpu::parallel_for(host_, threads_, [&](int64_t t) {
      Pass p = base;
      p.r0 = count * t / threads_;
      p.r1 = count * (t + 1) / threads_;
      f(p);
    });
  }
  template <class F>
  void rows(int64_t r, int64_t c, float* m, const float* aux, float* o, F&& f) {
    split(r, Pass{0, 0, r, c, m, aux, o}, f);
  }
  void cols(int64_t r, int64_t c, const float* m, float* o) {
    split(c, Pass{0, 0, r, c, const_cast<float*>(m), nullptr, o}, [](const Pass& p) {
      HWY_DYNAMIC_DISPATCH(ColSum)(p);
    });
  }

  std::string entry_;
  int threads_;
  const opf_host* host_;
  int64_t b_, in_, hid_, out_;
  std::vector<float> x_, w1_, b1_, w2_, b2_, dy_, h_, a_;
  std::vector<std::pair<std::string, std::vector<float>>> outs_;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

}  // namespace

OPF_PEER_ADAPTER(openblas_fused_dense, "openblas", "fused_dense", unsupported, make);

}  // namespace opf::suites::peers::dense_openblas
#endif  // HWY_ONCE
