// PyTorch eager's foreach ops as the unfused peer of multi_tensor: one full pass over the lists
// per op, as a Python caller without apex writes them:
//   scale:  out = torch._foreach_mul(in, scale);  flag: any(not torch.isfinite(t).all() for t in in)
//   axpby:  out = torch._foreach_mul(x, a);  torch._foreach_add_(out, y, alpha=b)  (ATen's add with
//           alpha: one fused multiply-add, out + b*y);  flag: the isfinite pass over x and/or y
//   l2norm: norms = torch._foreach_norm(tensors, 2, dtype=torch.float32) (per tensor, f32
//           accumulation, thread partials added in f32); total = torch.linalg.vector_norm(
//           torch.stack(norms)); flag: not total.isfinite()
// f32 math, each pass rounding its output to its tensor's dtype, scalars in f32 as PyTorch's opmath.
// Threads: each elementwise pass splits the lists' concatenated elements statically into `threads`
// slices (opf::host_threads + parallel_for), one barrier per pass; kinder to the peer than
// PyTorch's CPU foreach fallback, which runs tensor by tensor. The norm cuts each tensor of at
// least 32 Ki elements (ATen's grain) into `threads` slices and runs every slice of every tensor
// as one parallel_for. SIMD through Highway (dynamic dispatch), like ATen's vectorized kernels.
#ifndef OPF_MULTI_TENSOR_PEER_COMMON
#define OPF_MULTI_TENSOR_PEER_COMMON
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

namespace opf::suites::peers::multi_tensor_unfused {
enum class Op {
  mul,     // x = y * s
  addmul,  // x = x + s * y (fused multiply-add)
  check,   // *bad |= some y is not finite
  sumsq,   // *sum = f32 sum of y*y
};
struct Pass {
  Op op;
  int32_t dtype;  // of x and y
  void* x;
  const void* y;
  size_t n;
  float s;
  float* sum;
  bool* bad;
};
}  // namespace opf::suites::peers::multi_tensor_unfused
#endif  // OPF_MULTI_TENSOR_PEER_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/multi_tensor/peer_unfused.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::suites::peers::multi_tensor_unfused::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;
using opf::cpu::from_f32;
using opf::cpu::to_f32;

template <class S>
void PassT(const Pass& a) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto vs = hn::Set(d, a.s);
  S* x = static_cast<S*>(a.x);
  const S* y = static_cast<const S*>(a.y);
  size_t j = 0;
  switch (a.op) {
    case Op::mul:
      for (; j + N <= a.n; j += N) StoreRound(d, hn::Mul(LoadWiden(d, y + j), vs), x + j);
      for (; j < a.n; ++j) x[j] = from_f32<S>(to_f32(y[j]) * a.s);
      return;
    case Op::addmul:
      for (; j + N <= a.n; j += N) StoreRound(d, hn::MulAdd(vs, LoadWiden(d, y + j), LoadWiden(d, x + j)), x + j);
      for (; j < a.n; ++j) x[j] = from_f32<S>(std::fma(a.s, to_f32(y[j]), to_f32(x[j])));
      return;
    case Op::check: {
      auto probe = hn::Zero(d);
      bool bad = false;
      for (; j + N <= a.n; j += N) probe = hn::MulAdd(LoadWiden(d, y + j), hn::Zero(d), probe);
      for (; j < a.n; ++j) bad |= !std::isfinite(to_f32(y[j]));
      if (bad || !hn::AllTrue(d, hn::Eq(probe, hn::Zero(d)))) *a.bad = true;
      return;
    }
    case Op::sumsq: {
      auto acc = hn::Zero(d);
      float tail = 0;
      for (; j + N <= a.n; j += N) {
        const auto v = LoadWiden(d, y + j);
        acc = hn::MulAdd(v, v, acc);
      }
      for (; j < a.n; ++j) tail += to_f32(y[j]) * to_f32(y[j]);
      *a.sum = SumLanes(d, acc) + tail;
      return;
    }
  }
}

void RunPass(const Pass& a) {
  opf::cpu::with_storage(a.dtype, [&](auto s) { PassT<decltype(s)>(a); });
}

}  // namespace opf::suites::peers::multi_tensor_unfused::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::suites::peers {
namespace multi_tensor_unfused {
HWY_EXPORT(RunPass);

std::string unsupported(const PeerCase& c) {
  if (c.shape.size() != 2) return "multi_tensor shapes are [list_length, max_numel]";
  if (c.entry != "scale" && c.entry != "axpby" && c.entry != "l2norm") return "multi_tensor has scale, axpby, l2norm";
  return {};
}

class Run final : public PeerRun {
 public:
  Run(const PeerCase& c, const DrawnCase& drawn)
      : entry_(c.entry), dt_(c.dtype), host_(host_threads(c.threads)), threads_(c.threads), params_(c.params) {
    const char* lead = entry_ == "scale" ? "in" : entry_ == "axpby" ? "x" : "tensors";
    offsets_.push_back(0);
    for (const HostArg& h : drawn.host) {
      if (h.desc->name == lead) {
        x_.push_back(h.bytes.data());
        offsets_.push_back(offsets_.back() + h.desc->numel());
        if (entry_ != "l2norm") out_.emplace_back(h.bytes.size());
      } else if (h.desc->name == "y") {
        y_.push_back(h.bytes.data());
      }
    }
    per_.assign(x_.size(), 0.0f);
    if (entry_ == "l2norm") {  // slices: whole small tensors, `threads` slices of large ones
      for (size_t k = 0; k < x_.size(); ++k) {
        const int64_t n = offsets_[k + 1] - offsets_[k];
        const int64_t parts = n >= 32768 ? std::max(threads_, 1) : 1;
        for (int64_t p = 0; p < parts; ++p) slices_.push_back({k, n * p / parts, n * (p + 1) / parts});
      }
      slice_sums_.assign(slices_.size(), 0.0f);
    }
  }

  void run() override {
    const int32_t T = int32_t(dt_);
    bad_ = false;
    if (entry_ == "scale") {
      pass(Op::mul, float(params_.get("scale")), [&](size_t k) { return Ptrs{out_[k].data(), x_[k]}; });
      pass(Op::check, 0, [&](size_t k) { return Ptrs{nullptr, x_[k]}; });
    } else if (entry_ == "axpby") {
      const int64_t check = params_.get_int("arg_to_check");  // choice index: apex -1, 0, 1
      pass(Op::mul, float(params_.get("a")), [&](size_t k) { return Ptrs{out_[k].data(), x_[k]}; });
      pass(Op::addmul, float(params_.get("b")), [&](size_t k) { return Ptrs{out_[k].data(), y_[k]}; });
      if (check != 2) pass(Op::check, 0, [&](size_t k) { return Ptrs{nullptr, x_[k]}; });
      if (check != 1) pass(Op::check, 0, [&](size_t k) { return Ptrs{nullptr, y_[k]}; });
    } else {
      const size_t e = dtype_size(dt_);
      opf::cpu::parallel_for(host_, int64_t(slices_.size()), [&](int64_t i) {
        const Slice& s = slices_[size_t(i)];
        Pass a{Op::sumsq,
               T,
               nullptr,
               x_[s.tensor] + size_t(s.begin) * e,
               size_t(s.end - s.begin),
               0,
               &slice_sums_[size_t(i)],
               nullptr};
        HWY_DYNAMIC_DISPATCH(RunPass)(a);
      });
      std::fill(per_.begin(), per_.end(), 0.0f);
      for (size_t i = 0; i < slices_.size(); ++i) per_[slices_[i].tensor] += slice_sums_[i];
      float total = 0;
      for (float& v : per_) {
        v = std::sqrt(v);
        total += v * v;
      }
      norm_ = std::sqrt(total);
      bad_ = !std::isfinite(norm_);
    }
  }

  bool output(std::string_view name, std::vector<double>& out) const override {
    if (name == "noop_flag") {
      out.assign(1, bad_ ? 1.0 : 0.0);  // the drawn flag is 0
    } else if (name == "norm" && entry_ == "l2norm") {
      out.assign(1, double(norm_));
    } else if (name == "per_tensor_norms" && entry_ == "l2norm") {
      out.clear();
      if (params_.flag("per_tensor"))
        for (float v : per_) out.push_back(double(v));
    } else {
      return false;
    }
    return true;
  }

  bool output(std::string_view name, int k, std::vector<double>& out) const override {
    if (k < 0) return output(name, out);
    if (name != "out" || size_t(k) >= out_.size()) return false;
    const size_t n = size_t(offsets_[size_t(k) + 1] - offsets_[size_t(k)]);
    out.resize(n);
    for (size_t i = 0; i < n; ++i) out[i] = load_element(dt_, out_[size_t(k)].data(), int64_t(i));
    return true;
  }

 private:
  struct Ptrs {
    void* x;
    const std::byte* y;
  };
  struct Slice {
    size_t tensor;
    int64_t begin, end;
  };

  // One full pass over the lists: thread t takes elements [N t / threads, N (t+1) / threads) of
  // the concatenated lists.
  template <class F>
  void pass(Op op, float s, F&& ptrs) {
    const int64_t total = offsets_.back();
    const size_t e = dtype_size(dt_);
    const int slices = std::max(threads_, 1);
    std::vector<uint8_t> bad(size_t(slices), 0);
    opf::cpu::parallel_for(host_, slices, [&](int64_t t) {
      const int64_t lo = total * t / slices, hi = total * (t + 1) / slices;
      bool mine = false;
      size_t k = size_t(std::upper_bound(offsets_.begin(), offsets_.end(), lo) - offsets_.begin()) - 1;
      for (; k + 1 < offsets_.size() && offsets_[k] < hi; ++k) {
        const int64_t b = std::max(lo, offsets_[k]) - offsets_[k], end = std::min(hi, offsets_[k + 1]) - offsets_[k];
        if (end <= b) continue;
        const Ptrs q = ptrs(k);
        Pass a{op,
               int32_t(dt_),
               q.x ? static_cast<std::byte*>(q.x) + size_t(b) * e : nullptr,
               q.y + size_t(b) * e,
               size_t(end - b),
               s,
               nullptr,
               &mine};
        HWY_DYNAMIC_DISPATCH(RunPass)(a);
      }
      bad[size_t(t)] = mine;
    });
    bad_ |= std::find(bad.begin(), bad.end(), uint8_t(1)) != bad.end();
  }

  std::string entry_;
  DType dt_;
  const opf_host* host_;
  int threads_;
  Params params_;
  std::vector<int64_t> offsets_;
  std::vector<const std::byte*> x_, y_;
  std::vector<std::vector<std::byte>> out_;
  std::vector<Slice> slices_;
  std::vector<float> slice_sums_, per_;
  float norm_ = 0;
  bool bad_ = false;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

}  // namespace multi_tensor_unfused

OPF_PEER_ADAPTER(unfused_multi_tensor, "unfused", "multi_tensor", multi_tensor_unfused::unsupported,
                 multi_tensor_unfused::make);

}  // namespace opf::suites::peers
#endif  // HWY_ONCE
