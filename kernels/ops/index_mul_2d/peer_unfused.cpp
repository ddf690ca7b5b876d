// PyTorch eager's index_mul_2d as the unfused peer of index_mul_2d: what apex's Python fallback
// (and a plain PyTorch model) runs, one full pass per op:
//   forward:   t = in1.index_select(0, idx);  out = t * in2
//   backward:  t = in1.index_select(0, idx);  grad_in2 = grad_out * t
//              u = grad_out * in2;  grad_in1 = zeros(M, F).index_add_(0, idx, u)
// f32 math, each pass rounding its output to T (the temporaries t, u in T). index_add_ walks the
// indices in ascending order (as ATen's CPU index_add_ for dim 0); for f16 it adds into an f32
// copy that a last pass rounds to grad_in1 (ATen adds into the f16 tensor itself, losing bits at
// every add: the peer is kinder; its f16 grad_in1 is still not compared, see output()). Temporaries are allocated
// once (PyTorch's caching allocator reuses them). Threads: the row passes split the rows
// statically into `threads` slices; index_add_ splits the columns, every slice walking all
// indices. SIMD through Highway (dynamic dispatch).
#ifndef OPF_INDEX_MUL_2D_PEER_COMMON
#define OPF_INDEX_MUL_2D_PEER_COMMON
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

namespace opf::suites::peers::index_mul_2d_unfused {
enum class Op {
  gather,   // x[r] = y[idx[r]]           rows of S
  mul,      // x[r] = y[r] * z[r]          rows of S
  add_f32,  // acc[idx[r], cols] += y[r, cols] for every r, in order (acc: f32 rows)
  round,    // x[r] = acc[r]               f32 -> S
};
struct Pass {
  Op op;
  int32_t dtype;
  void* x;
  const void* y;
  const void* z;
  const int64_t* idx;
  int64_t r0, r1;  // rows (gather, mul, round); all rows for the adds
  int64_t c0, c1;  // columns (adds); all columns otherwise
  int64_t f;
};
}  // namespace opf::suites::peers::index_mul_2d_unfused
#endif  // OPF_INDEX_MUL_2D_PEER_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/index_mul_2d/peer_unfused.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::suites::peers::index_mul_2d_unfused::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;
using opf::cpu::from_f32;
using opf::cpu::to_f32;

template <class S>
void PassT(const Pass& p) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const int64_t f = p.f;
  switch (p.op) {
    case Op::gather: {
      for (int64_t r = p.r0; r < p.r1; ++r)
        std::memcpy(static_cast<S*>(p.x) + r * f, static_cast<const S*>(p.y) + p.idx[r] * f, size_t(f) * sizeof(S));
      return;
    }
    case Op::mul: {
      S* x = static_cast<S*>(p.x) + p.r0 * f;
      const S* y = static_cast<const S*>(p.y) + p.r0 * f;
      const S* z = static_cast<const S*>(p.z) + p.r0 * f;
      const size_t n = size_t((p.r1 - p.r0) * f);
      size_t j = 0;
      for (; j + N <= n; j += N) StoreRound(d, hn::Mul(LoadWiden(d, y + j), LoadWiden(d, z + j)), x + j);
      for (; j < n; ++j) x[j] = from_f32<S>(to_f32(y[j]) * to_f32(z[j]));
      return;
    }
    case Op::round: {
      S* x = static_cast<S*>(p.x) + p.r0 * f;
      const float* y = static_cast<const float*>(p.y) + p.r0 * f;
      const size_t n = size_t((p.r1 - p.r0) * f);
      size_t j = 0;
      for (; j + N <= n; j += N) StoreRound(d, hn::LoadU(d, y + j), x + j);
      for (; j < n; ++j) x[j] = from_f32<S>(y[j]);
      return;
    }
    case Op::add_f32: {
      const size_t w = size_t(p.c1 - p.c0);
      for (int64_t r = p.r0; r < p.r1; ++r) {
        const S* y = static_cast<const S*>(p.y) + r * f + p.c0;
        float* x = static_cast<float*>(p.x) + p.idx[r] * f + p.c0;
        size_t j = 0;
        for (; j + N <= w; j += N) hn::StoreU(hn::Add(hn::LoadU(d, x + j), LoadWiden(d, y + j)), d, x + j);
        for (; j < w; ++j) x[j] += to_f32(y[j]);
      }
      return;
    }
  }
}

void RunPass(const Pass& a) {
  opf::cpu::with_storage(a.dtype, [&](auto s) { PassT<decltype(s)>(a); });
}

}  // namespace opf::suites::peers::index_mul_2d_unfused::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::suites::peers {
namespace index_mul_2d_unfused {
HWY_EXPORT(RunPass);

std::string unsupported(const PeerCase& c) {
  if (c.shape.size() != 3) return "index_mul_2d shapes are [M, N, F]";
  if (c.entry != "forward" && c.entry != "backward") return "index_mul_2d has forward and backward";
  return {};
}

class Run final : public PeerRun {
 public:
  Run(const PeerCase& c, const DrawnCase& drawn)
      : dt_(c.dtype),
        e_(dtype_size(c.dtype)),
        host_(host_threads(c.threads)),
        threads_(c.threads),
        forward_(c.entry == "forward") {
    for (const HostArg& h : drawn.host) {
      const std::string& name = h.desc->name;
      if (name == "in1") in1_ = h.bytes, m_ = h.desc->shape[0], f_ = h.desc->shape[1];
      if (name == "in2") in2_ = h.bytes, n_ = h.desc->shape[0];
      if (name == "grad_out") g_ = h.bytes;
      if (name == "idx") {
        idx_.resize(size_t(h.desc->numel()));
        std::memcpy(idx_.data(), h.bytes.data(), idx_.size() * sizeof(int64_t));
      }
    }
    const size_t nf = size_t(n_ * f_), mf = size_t(m_ * f_);
    t_.resize(nf * e_);
    out_.resize(nf * e_);  // forward: out; backward: grad_in2
    if (!forward_) {
      u_.resize(nf * e_);
      g1_.resize(mf * e_);
      if (dt_ != DType::f32) acc_.resize(mf);
    }
  }

  void run() override {
    const int32_t T = int32_t(dt_);
    rows(Op::gather, t_.data(), in1_.data(), nullptr);
    if (forward_) {
      rows(Op::mul, out_.data(), t_.data(), in2_.data());
      return;
    }
    rows(Op::mul, out_.data(), g_.data(), t_.data());
    rows(Op::mul, u_.data(), g_.data(), in2_.data());
    // zeros(M, F): a memset pass, then index_add_ in index order (columns split across threads)
    float* acc = dt_ == DType::f32 ? reinterpret_cast<float*>(g1_.data()) : acc_.data();
    std::memset(acc, 0, size_t(m_ * f_) * sizeof(float));
    const int slices = std::max(threads_, 1);
    opf::cpu::parallel_for(host_, slices, [&](int64_t t) {
      const Pass p{Op::add_f32,           T, acc, u_.data(), nullptr, idx_.data(), 0, n_, f_ * t / slices,
                   f_ * (t + 1) / slices, f_};
      if (p.c1 > p.c0) HWY_DYNAMIC_DISPATCH(RunPass)(p);
    });
    if (dt_ != DType::f32) rows(Op::round, g1_.data(), acc, nullptr, m_);
  }

  bool output(std::string_view name, std::vector<double>& out) const override {
    const std::vector<std::byte>* src = nullptr;
    if (forward_ && name == "out") src = &out_;
    if (!forward_ && name == "grad_in2") src = &out_;
    // f16 grad_in1: PyTorch rounds each product u to f16 before index_add_, an error per term
    // that the op's tolerance (f32 sums) does not cover; the peer reports what PyTorch computes,
    // so that output is not compared (grad_in2 still is).
    if (!forward_ && name == "grad_in1" && dt_ == DType::f32) src = &g1_;
    if (!src) return false;
    out.resize(src->size() / e_);
    for (size_t i = 0; i < out.size(); ++i) out[i] = load_element(dt_, src->data(), int64_t(i));
    return true;
  }

 private:
  // One pass over `rows` rows (default N), thread t taking rows [rows t / threads, rows (t+1) / threads).
  void rows(Op op, void* x, const void* y, const void* z, int64_t rows = -1) {
    if (rows < 0) rows = n_;
    const int slices = std::max(threads_, 1);
    opf::cpu::parallel_for(host_, slices, [&](int64_t t) {
      const Pass p{op, int32_t(dt_), x, y, z, idx_.data(), rows * t / slices, rows * (t + 1) / slices, 0, f_, f_};
      if (p.r1 > p.r0) HWY_DYNAMIC_DISPATCH(RunPass)(p);
    });
  }

  DType dt_;
  size_t e_;
  const opf_host* host_;
  int threads_;
  bool forward_;
  int64_t m_ = 0, n_ = 0, f_ = 0;
  std::vector<std::byte> in1_, in2_, g_, t_, u_, out_, g1_;
  std::vector<float> acc_;
  std::vector<int64_t> idx_;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

}  // namespace index_mul_2d_unfused

OPF_PEER_ADAPTER(unfused_index_mul_2d, "unfused", "index_mul_2d", index_mul_2d_unfused::unsupported,
                 index_mul_2d_unfused::make);

}  // namespace opf::suites::peers
#endif  // HWY_ONCE
