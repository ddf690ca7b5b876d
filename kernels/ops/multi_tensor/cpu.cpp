// multi_tensor — CPU module (contract: ref.cpp). Highway SIMD: prebuilt modules dispatch on the
// running CPU; the JIT builds only the host target.
// One pass over memory per entry: scale reads in and writes out, axpby reads x, y and writes
// out, l2norm only reads; the non-finite check rides along in the same loop (a probe vector that
// accumulates v*0, which stays 0 unless some v is NaN or infinite). Outputs larger than
// OPF_TUNE_STREAM_MIN_BYTES in total are written with non-temporal stores, so that they do not
// cost a read-for-ownership per cache line.
// Work is cut the multi_tensor_apply way: every tensor into chunks of OPF_TUNE_CHUNK elements (its
// last chunk shorter), and consecutive chunks, across tensors, grouped into tasks of at least
// OPF_TUNE_CHUNK elements, so that a list of many small tensors does not become one task each.
// Boundaries come from the sizes alone. scale and axpby are elementwise; l2norm sums each chunk
// in f32 with the same vector code wherever the chunk lies (a tensor's last partial vector goes
// through zero-padded lane buffers), and adds the chunk sums in f64 in list order after the tasks
// end, so any thread count gives the same bits.
// Arithmetic as written (ref.cpp's contract): no implicit a*b+c -> fma contraction, so that the
// scalar head/tail of a row rounds exactly like its vectors. First line of the TU on purpose:
// every function, Highway's included, must carry the same optimize options to stay inlinable.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif
#ifndef OPF_TUNE_CHUNK
#define OPF_TUNE_CHUNK 65536
#endif
#ifndef OPF_TUNE_STREAM_MIN_BYTES
#define OPF_TUNE_STREAM_MIN_BYTES 16777216
#endif

#ifndef OPF_MULTI_TENSOR_CPU_COMMON
#define OPF_MULTI_TENSOR_CPU_COMMON
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "cpu/args.h"
#include "cpu/dispatch.h"
#include "cpu/parallel.h"
#include "cpu/storage.h"
#include "opforge/module.h"

namespace opf::multi_tensor_cpu {
// One contiguous run of elements of one tensor.
struct Piece {
  int32_t tensor;
  int64_t begin, end;
};
struct Plan {
  std::vector<Piece> pieces;        // in list order
  std::vector<int64_t> task_start;  // pieces of task t: [task_start[t], task_start[t + 1])
  int64_t tasks() const { return int64_t(task_start.size()) - 1; }
};

// scale (y null) and axpby.
struct Elementwise {
  const opf_host* host;
  int32_t in_dtype, out_dtype;
  const opf_tensor *x, *y, *out;
  float s, a, b;          // scale: out = x*s; axpby: out = a*x + b*y
  bool check_x, check_y;  // which inputs set the flag
  bool stream;
  Plan plan;
  bool nonfinite;  // out: a checked input element was NaN or infinite
};

struct Norm {
  const opf_host* host;
  int32_t dtype;
  const opf_tensor* t;
  Plan plan;
  std::vector<float> sums;  // out: each piece's f32 sum of squares
};
}  // namespace opf::multi_tensor_cpu
#endif  // OPF_MULTI_TENSOR_CPU_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/multi_tensor/cpu.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::multi_tensor_cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;
using opf::cpu::to_f32;

// Elements [0, n) of one tensor of each list; true if a checked input element is not finite.
// No HWY_RESTRICT: out may be the input itself.
template <bool kAxpby, class SI, class SO>
bool Row(const Elementwise& e, const SI* x, const SI* y, SO* out, size_t n) {
  const hn::ScalableTag<float> d;
  const auto zero = hn::Zero(d), vs = hn::Set(d, e.s), va = hn::Set(d, e.a), vb = hn::Set(d, e.b);
  // Both inputs are probed and the flags (check_x, check_y) applied once at the end: branches on
  // them in the loops made the compilers unswitch every loop into a copy per combination (GCC: a
  // third of axpby's JIT compile time); masks in the loop cost bf16's axpby 6 % at 1 thread.
  auto px = zero, py = zero;
  bool bad_x = false, bad_y = false;
  WriteRow(
      d, out, n, e.stream,
      [&](size_t j) {
        const auto xv = LoadWiden(d, x + j);
        px = hn::MulAdd(xv, zero, px);
        if constexpr (kAxpby) {
          const auto yv = LoadWiden(d, y + j);
          py = hn::MulAdd(yv, zero, py);
          return hn::Add(hn::Mul(va, xv), hn::Mul(vb, yv));
        } else {
          return hn::Mul(xv, vs);
        }
      },
      [&](size_t j) {
        const float xf = to_f32(x[j]);
        bad_x |= !std::isfinite(xf);
        if constexpr (kAxpby) {
          const float yf = to_f32(y[j]);
          bad_y |= !std::isfinite(yf);
          const float ax = e.a * xf, by = e.b * yf;
          return ax + by;
        } else {
          return xf * e.s;
        }
      });
  return (e.check_x && (bad_x || !hn::AllTrue(d, hn::Eq(px, zero)))) ||
         (e.check_y && (bad_y || !hn::AllTrue(d, hn::Eq(py, zero))));
}

template <bool kAxpby, class SI, class SO>
void ElementwiseT(Elementwise& e) {
  std::vector<uint8_t> bad(size_t(e.plan.tasks()), 0);
  opf::cpu::parallel_for(e.host, e.plan.tasks(), [&](int64_t t) {
    bool any = false;
    for (int64_t k = e.plan.task_start[size_t(t)]; k < e.plan.task_start[size_t(t) + 1]; ++k) {
      const Piece& pc = e.plan.pieces[size_t(k)];
      const size_t i = size_t(pc.tensor), b = size_t(pc.begin);
      const SI* y = kAxpby ? static_cast<const SI*>(e.y[i].data) + b : nullptr;
      any |= Row<kAxpby>(e, static_cast<const SI*>(e.x[i].data) + b, y, static_cast<SO*>(e.out[i].data) + b,
                         size_t(pc.end - pc.begin));
    }
    if (e.stream) hwy::FlushStream();
    bad[size_t(t)] = any;
  });
  e.nonfinite = std::find(bad.begin(), bad.end(), uint8_t(1)) != bad.end();
}

template <bool kAxpby, class SI>
void DispatchOut(Elementwise& e) {
  opf::cpu::with_storage(e.out_dtype, [&](auto so) { ElementwiseT<kAxpby, SI, decltype(so)>(e); });
}

void RunScale(Elementwise& e) {
  opf::cpu::run_storage<"scale">(e.in_dtype, [&](auto si) { DispatchOut<false, decltype(si)>(e); });
}
void RunAxpby(Elementwise& e) {
  opf::cpu::run_storage<"axpby">(e.in_dtype, [&](auto si) { DispatchOut<true, decltype(si)>(e); });
}

// f32 sum of squares of x[0, n): four vector accumulators, a padded last vector, then the lanes.
template <class S>
float SumSquares(const S* HWY_RESTRICT x, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  auto a0 = hn::Zero(d), a1 = a0, a2 = a0, a3 = a0;
  size_t j = 0;
  for (; j + 4 * N <= n; j += 4 * N) {
    const auto v0 = LoadWiden(d, x + j), v1 = LoadWiden(d, x + j + N), v2 = LoadWiden(d, x + j + 2 * N),
               v3 = LoadWiden(d, x + j + 3 * N);
    a0 = hn::MulAdd(v0, v0, a0);
    a1 = hn::MulAdd(v1, v1, a1);
    a2 = hn::MulAdd(v2, v2, a2);
    a3 = hn::MulAdd(v3, v3, a3);
  }
  for (; j + N <= n; j += N) {
    const auto v = LoadWiden(d, x + j);
    a0 = hn::MulAdd(v, v, a0);
  }
  if (j < n) {
    HWY_ALIGN S buf[hn::MaxLanes(d)] = {};
    std::memcpy(buf, x + j, (n - j) * sizeof(S));
    const auto v = LoadWiden(d, buf);
    a0 = hn::MulAdd(v, v, a0);
  }
  return SumLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)));
}

template <class S>
void NormT(Norm& a) {
  a.sums.assign(a.plan.pieces.size(), 0.0f);
  opf::cpu::parallel_for(a.host, a.plan.tasks(), [&](int64_t t) {
    for (int64_t k = a.plan.task_start[size_t(t)]; k < a.plan.task_start[size_t(t) + 1]; ++k) {
      const Piece& pc = a.plan.pieces[size_t(k)];
      a.sums[size_t(k)] = SumSquares(static_cast<const S*>(a.t[pc.tensor].data) + pc.begin, size_t(pc.end - pc.begin));
    }
  });
}

void RunNorm(Norm& a) {
  opf::cpu::run_storage<"l2norm">(a.dtype, [&](auto s) { NormT<decltype(s)>(a); });
}

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace opf::multi_tensor_cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::multi_tensor_cpu {
OPF_KERNEL_EXPORT(RunScale);
OPF_KERNEL_EXPORT(RunAxpby);
OPF_KERNEL_EXPORT(RunNorm);
OPF_CPU_EXPORT_TARGET()
}  // namespace opf::multi_tensor_cpu
#endif  // HWY_ONCE

#if HWY_ONCE && OPF_HOST_PART  // the host code: not in a JIT kernels module (cpu/dispatch.h)
OPF_HOST_CODE_BEGIN
namespace opf::multi_tensor_cpu {
using namespace opf::cpu;
using List = TensorList;

// Chunks of OPF_TUNE_CHUNK elements per tensor; tasks of consecutive chunks, >= OPF_TUNE_CHUNK.
Plan make_plan(List lead) {
  const int64_t chunk = OPF_TUNE_CHUNK;
  Plan p;
  p.task_start.push_back(0);
  int64_t in_task = 0;
  for (size_t k = 0; k < lead.size(); ++k) {
    const int64_t n = numel(lead[k]);
    for (int64_t b = 0; b < n; b += chunk) {
      const int64_t end = std::min(n, b + chunk);
      p.pieces.push_back({int32_t(k), b, end});
      in_task += end - b;
      if (in_task >= chunk) {
        p.task_start.push_back(int64_t(p.pieces.size()));
        in_task = 0;
      }
    }
  }
  if (in_task > 0) p.task_start.push_back(int64_t(p.pieces.size()));
  return p;
}

// The first list of an entry: one float dtype for all its tensors (returned), data where non-empty.
int32_t check_lead(const Args& args, List lead, const char* name) {
  const char* e = args.entry();
  if (lead.empty()) return OPF_F32;
  const int32_t dtype = lead[0].dtype;
  if (!is_float_storage(dtype)) failf("%s: %s[0] has dtype %s, expected f32, f16 or bf16", e, name, dtype_str(dtype));
  for (size_t k = 0; k < lead.size(); ++k) {
    if (lead[k].dtype != dtype)
      failf("%s: %s[%zu] has dtype %s, %s[0] has %s (one dtype per list)", e, name, k, dtype_str(lead[k].dtype), name,
            dtype_str(dtype));
    if (numel(lead[k]) > 0 && !lead[k].data) failf("%s: %s[%zu] has no data", e, name, k);
  }
  return dtype;
}

// List `name` parallel to `lead`: the same length, the same numel per index, one dtype (`dtype`,
// or with dtype < 0 any float dtype shared by the whole list, returned).
int32_t check_list(const Args& args, List list, const char* name, List lead, const char* lead_name, int32_t dtype) {
  const char* e = args.entry();
  if (list.size() != lead.size())
    failf("%s: list %s has %zu tensors, %s has %zu", e, name, list.size(), lead_name, lead.size());
  if (list.empty()) return dtype < 0 ? OPF_F32 : dtype;
  if (dtype < 0) {
    dtype = list[0].dtype;
    if (!is_float_storage(dtype)) failf("%s: %s[0] has dtype %s, expected f32, f16 or bf16", e, name, dtype_str(dtype));
  }
  for (size_t k = 0; k < list.size(); ++k) {
    const opf_tensor& t = list[k];
    if (t.dtype != dtype)
      failf("%s: %s[%zu] has dtype %s, expected %s (the dtype of %s[0])", e, name, k, dtype_str(t.dtype),
            dtype_str(dtype), t.dtype == list[0].dtype ? lead_name : name);
    if (numel(t) != numel(lead[k]))
      failf("%s: %s[%zu] has %lld elements, %s[%zu] has %lld", e, name, k, (long long)numel(t), lead_name, k,
            (long long)numel(lead[k]));
    if (numel(t) > 0 && !t.data) failf("%s: %s[%zu] has no data", e, name, k);
  }
  return dtype;
}

// out[k] may be exactly its input (in place, same dtype) but must not partly overlap it: the
// rows would read elements they already wrote.
void check_overlap(const Args& args, List out, const char* name, List in, const char* in_name) {
  for (size_t k = 0; k < out.size(); ++k) {
    const auto* o = static_cast<const char*>(out[k].data);
    const auto* i = static_cast<const char*>(in[k].data);
    const int64_t n = numel(out[k]);
    if (n == 0 || (o == i && out[k].dtype == in[k].dtype)) continue;
    const auto* o_end = o + n * int64_t(dtype_size(DType(out[k].dtype)));
    const auto* i_end = i + n * int64_t(dtype_size(DType(in[k].dtype)));
    if (o < i_end && i < o_end)
      failf("%s: %s[%zu] overlaps %s[%zu] without being it (in place needs the same data and dtype)", args.entry(),
            name, k, in_name, k);
  }
}

int32_t* flag_of(const Args& args, int i) {
  return static_cast<int32_t*>(expect_arg(args, i, "noop_flag", OPF_I32, {1}).data);
}

void elementwise(const opf_call* c, bool execute, bool axpby) {
  const Args args(c, axpby ? 4 : 3, 5);
  const char* e = args.entry();
  const double scale = args.f64(0, "scale"), a = args.f64(1, "a"), b = args.f64(2, "b");
  const int64_t check = args.choice(3, "arg_to_check");
  (void)args.flag(4, "per_tensor");
  if (check < 0 || check > 2)
    failf("%s: param arg_to_check has choice index %lld, expected 0..2 (-1, 0, 1)", e, (long long)check);
  const char* xn = axpby ? "x" : "in";
  const List x = args.list(0, xn), y = axpby ? args.list(1, "y") : List{}, out = args.list(axpby ? 2 : 1, "out");
  int32_t* noop = flag_of(args, axpby ? 3 : 2);
  const int32_t in_dtype = check_lead(args, x, xn);
  if (axpby) check_list(args, y, "y", x, "x", in_dtype);
  const int32_t out_dtype = check_list(args, out, "out", x, xn, -1);
  check_overlap(args, out, "out", x, xn);
  if (axpby) check_overlap(args, out, "out", y, "y");
  if (!execute || x.empty()) return;

  Elementwise w{};
  w.host = c->host;
  w.in_dtype = in_dtype;
  w.out_dtype = out_dtype;
  w.x = x.data();
  w.y = axpby ? y.data() : nullptr;
  w.out = out.data();
  w.s = float(scale);
  w.a = float(a);
  w.b = float(b);
  w.check_x = !axpby || check != 2;  // choice index 0, 1, 2 = apex -1 (both), 0 (x), 1 (y)
  w.check_y = axpby && check != 1;
  w.plan = make_plan(x);
  if (w.plan.pieces.empty()) return;
  double out_bytes = 0;
  for (const opf_tensor& t : out) out_bytes += double(numel(t)) * double(dtype_size(DType(t.dtype)));
  w.stream = out_bytes >= double(OPF_TUNE_STREAM_MIN_BYTES);
  if (axpby) {
    OPF_DISPATCH(RunAxpby)(w);
  } else {
    OPF_DISPATCH(RunScale)(w);
  }
  if (w.nonfinite) *noop = 1;
}

void l2norm(const opf_call* c, bool execute) {
  const Args args(c, 4, 5);
  const char* e = args.entry();
  (void)args.f64(0, "scale"), (void)args.f64(1, "a"), (void)args.f64(2, "b"), (void)args.choice(3, "arg_to_check");
  const bool per_tensor = args.flag(4, "per_tensor");
  const List t = args.list(0, "tensors");
  const int32_t dtype = check_lead(args, t, "tensors");
  float* norm = static_cast<float*>(expect_arg(args, 1, "norm", OPF_F32, {1}).data);
  const opf_tensor& pt = args.tensor(2, "per_tensor_norms");
  const int64_t want = per_tensor ? int64_t(t.size()) : 0;
  if (pt.ndim != 1 || pt.shape[0] != want)
    failf("%s: argument 2 (per_tensor_norms) must be [%lld] (%s), got %d dims, %lld elements", e, (long long)want,
          per_tensor ? "one norm per tensor" : "empty without per_tensor", pt.ndim, (long long)numel(pt));
  float* per = static_cast<float*>(expect_arg(args, 2, "per_tensor_norms", OPF_F32, {want}).data);
  int32_t* noop = flag_of(args, 3);
  if (!execute) return;

  Norm a{};
  a.host = c->host;
  a.dtype = dtype;
  a.t = t.data();
  a.plan = make_plan(t);
  if (!a.plan.pieces.empty()) OPF_DISPATCH(RunNorm)(a);
  std::vector<double> sums(t.size(), 0.0);
  bool nonfinite = false;
  for (size_t k = 0; k < a.plan.pieces.size(); ++k) {
    nonfinite |= !std::isfinite(a.sums[k]);
    sums[size_t(a.plan.pieces[k].tensor)] += double(a.sums[k]);
  }
  double global = 0;
  for (size_t k = 0; k < sums.size(); ++k) {
    global += sums[k];
    if (per_tensor) per[k] = float(std::sqrt(sums[k]));
  }
  norm[0] = float(std::sqrt(global));
  if (nonfinite) *noop = 1;
}

void call(const opf_call* c, bool execute) {
  const std::string_view entry = c->entry ? c->entry : "";
  if (entry == "scale" || entry == "axpby") return elementwise(c, execute, entry == "axpby");
  if (entry == "l2norm") return l2norm(c, execute);
  failf("unknown entry '%.40s' (multi_tensor has scale, axpby, l2norm)", c->entry ? c->entry : "");
}

}  // namespace opf::multi_tensor_cpu

OPF_DEFINE_MODULE("multi_tensor", "cpu", opf::multi_tensor_cpu::isa(), opf::multi_tensor_cpu::call)
OPF_HOST_CODE_END
#endif  // HWY_ONCE
