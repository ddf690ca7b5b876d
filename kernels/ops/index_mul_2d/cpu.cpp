// index_mul_2d — CPU module (contract, incl. the sum order of grad_in1 and idx errors: ref.cpp).
// Highway SIMD: prebuilt modules dispatch on the running CPU; the JIT builds only the host target.
//   forward: rows of out in tasks (cpu/parallel.h); each row reads its in1 row (gathered) and its
//            in2 row once and writes out once.
//   backward: one pass. The rows i are bucketed by target row m = idx[i] (a counting sort,
//            stable: ascending i within a bucket); tasks are blocks of target rows x blocks of
//            columns. For each target row and column block the task walks the bucket: grad_in1's
//            f32 sums stay in L1 while each grad_out and in2 row segment is read once, and
//            grad_in2 = grad_out * in1[m] is written from the same loads (in1[m] is hot). Every
//            row i is in exactly one bucket, so grad_in2 is written once, with no atomics. The
//            sum for (m, c) runs over its bucket in ascending i whatever the task split, so the
//            bits do not depend on the thread count (nor on the task sizes).
//   double_backward: the same bucket walk with grad_grad_in2 in place of in2 and grad_grad_in1 in
//            place of in1, also writing grad_grad_out[i] (reads in2[i] and in1[m] besides).
// Products and sums are separate f32 roundings (no fma: the scalar column tails then give the same
// bits as the vector body). First line of the TU on purpose: every function, Highway's included,
// must carry the same optimize options to stay inlinable.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif
#ifndef OPF_TUNE_COLUMN_BLOCK
#define OPF_TUNE_COLUMN_BLOCK 1024  // columns of one backward task: 4 KiB of f32 sums
#endif
#ifndef OPF_INDEX_MUL_2D_CPU_COMMON
#define OPF_INDEX_MUL_2D_CPU_COMMON
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <tuple>
#include <vector>

#include "cpu/args.h"
#include "cpu/dispatch.h"
#include "cpu/parallel.h"
#include "cpu/storage.h"
#include "opforge/module.h"

namespace opf::index_mul_2d_cpu {
struct Forward {
  const opf_host* host;
  int32_t dtype;
  int64_t m, n, f;
  const void* in1;
  const void* in2;
  const int64_t* idx;
  void* out;
};
// backward and double_backward, one bucket walk: grad_in1[m] = sum a[i]*b[i] over m's bucket,
// grad_in2[i] = a[i]*c[m], and (double_backward) grad_grad_out[i] = c[m]*d[i] + b[i]*e[m].
//   backward:         a = grad_out, b = in2, c = in1
//   double_backward:  a = grad_out, b = grad_grad_in2, c = grad_grad_in1, d = in2, e = in1
struct Backward {
  const opf_host* host;
  int32_t dtype;
  int64_t m, n, f;
  const void* a;        // [N, F]
  const void* b;        // [N, F]
  const void* c;        // [M, F]
  const void* d;        // [N, F] (double_backward)
  const void* e;        // [M, F] (double_backward)
  void* grad_grad_out;  // [N, F] (double_backward; null for backward)
  void* grad_in1;
  void* grad_in2;
  const int64_t* start;  // bucket of target row m: order[start[m] .. start[m + 1])
  const int64_t* order;  // the rows i, grouped by idx[i], ascending i within a group
};
}  // namespace opf::index_mul_2d_cpu
#endif  // OPF_INDEX_MUL_2D_CPU_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/index_mul_2d/cpu.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::index_mul_2d_cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;
using opf::cpu::from_f32;
using opf::cpu::to_f32;

// y[c] = a[c] * b[c] for c in [0, n)
template <class S>
HWY_INLINE void MulRow(const S* HWY_RESTRICT a, const S* HWY_RESTRICT b, S* HWY_RESTRICT y, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t c = 0;
  for (; c + 2 * N <= n; c += 2 * N) {
    StoreRound(d, hn::Mul(LoadWiden(d, a + c), LoadWiden(d, b + c)), y + c);
    StoreRound(d, hn::Mul(LoadWiden(d, a + c + N), LoadWiden(d, b + c + N)), y + c + N);
  }
  for (; c + N <= n; c += N) StoreRound(d, hn::Mul(LoadWiden(d, a + c), LoadWiden(d, b + c)), y + c);
  for (; c < n; ++c) y[c] = from_f32<S>(to_f32(a[c]) * to_f32(b[c]));
}

template <class S>
void ForwardT(const Forward& a) {
  const S* in1 = static_cast<const S*>(a.in1);
  const S* in2 = static_cast<const S*>(a.in2);
  S* out = static_cast<S*>(a.out);
  const int64_t f = a.f;
  const int64_t chunk = opf::cpu::rows_per_task(a.n, 3.0 * double(f) * sizeof(S));
  opf::cpu::parallel_rows(a.host, a.n, chunk, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) MulRow(in1 + a.idx[i] * f, in2 + i * f, out + i * f, size_t(f));
  });
}

// One target row m, columns [c0, c0 + w): walks m's bucket.
template <bool kDouble, class S>
HWY_INLINE void BucketColumns(const Backward& a, int64_t m, int64_t c0, size_t w, float* HWY_RESTRICT acc) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const int64_t f = a.f;
  const S* g = static_cast<const S*>(a.a) + c0;
  const S* in2 = static_cast<const S*>(a.b) + c0;
  const S* x1 = static_cast<const S*>(a.c) + m * f + c0;
  const S* dd = kDouble ? static_cast<const S*>(a.d) + c0 : nullptr;
  const S* ee = kDouble ? static_cast<const S*>(a.e) + m * f + c0 : nullptr;
  S* ggo = kDouble ? static_cast<S*>(a.grad_grad_out) + c0 : nullptr;
  S* g2 = static_cast<S*>(a.grad_in2) + c0;
  S* g1 = static_cast<S*>(a.grad_in1) + m * f + c0;
  const int64_t b0 = a.start[m], b1 = a.start[m + 1];
  if (b0 == b1) {  // no row points here
    for (size_t c = 0; c < w; ++c) g1[c] = from_f32<S>(0.0f);
    return;
  }
  std::fill(acc, acc + w, 0.0f);
  for (int64_t k = b0; k < b1; ++k) {
    const int64_t i = a.order[k];
    const S* gi = g + i * f;
    const S* in2i = in2 + i * f;
    S* g2i = g2 + i * f;
    size_t c = 0;
    for (; c + N <= w; c += N) {
      const auto gv = LoadWiden(d, gi + c), bv = LoadWiden(d, in2i + c), cv = LoadWiden(d, x1 + c);
      hn::Store(hn::Add(hn::Load(d, acc + c), hn::Mul(gv, bv)), d, acc + c);
      StoreRound(d, hn::Mul(gv, cv), g2i + c);
      if constexpr (kDouble)
        StoreRound(d, hn::Add(hn::Mul(cv, LoadWiden(d, dd + i * f + c)), hn::Mul(bv, LoadWiden(d, ee + c))),
                   ggo + i * f + c);
    }
    for (; c < w; ++c) {
      const float gv = to_f32(gi[c]), bv = to_f32(in2i[c]), cv = to_f32(x1[c]);
      acc[c] = acc[c] + gv * bv;
      g2i[c] = from_f32<S>(gv * cv);
      if constexpr (kDouble) ggo[i * f + c] = from_f32<S>(cv * to_f32(dd[i * f + c]) + bv * to_f32(ee[c]));
    }
  }
  size_t c = 0;
  for (; c + N <= w; c += N) StoreRound(d, hn::Load(d, acc + c), g1 + c);
  for (; c < w; ++c) g1[c] = from_f32<S>(acc[c]);
}

template <bool kDouble, class S>
void BackwardT(const Backward& a) {
  const int64_t f = a.f, cb = std::min<int64_t>(f, OPF_TUNE_COLUMN_BLOCK);
  if (f == 0) return;
  const int64_t col_blocks = (f + cb - 1) / cb;
  // traffic of one target row's column block: its bucket's grad_out, in2 and grad_in2 segments
  // (N / M rows on average) plus its own in1 and grad_in1 segments
  const double per_row = ((kDouble ? 5.0 : 3.0) * double(a.n) / double(a.m) + 2.0) * double(cb) * sizeof(S);
  const int64_t rows = opf::cpu::rows_per_task(a.m, per_row);
  const int64_t row_blocks = (a.m + rows - 1) / rows;
  opf::cpu::parallel_for(a.host, row_blocks * col_blocks, [&](int64_t t) {
    HWY_ALIGN float acc[OPF_TUNE_COLUMN_BLOCK];
    const int64_t rb = t / col_blocks, c0 = (t % col_blocks) * cb;
    const size_t w = size_t(std::min(f - c0, cb));
    for (int64_t m = rb * rows; m < std::min(a.m, (rb + 1) * rows); ++m) BucketColumns<kDouble, S>(a, m, c0, w, acc);
  });
}

void RunForward(const Forward& a) {
  opf::cpu::run_storage<"forward">(a.dtype, [&](auto s) { ForwardT<decltype(s)>(a); });
}
void RunBackward(const Backward& a) {
  opf::cpu::run_storage<"backward">(a.dtype, [&](auto s) { BackwardT<false, decltype(s)>(a); });
}
void RunDoubleBackward(const Backward& a) {
  opf::cpu::run_storage<"double_backward">(a.dtype, [&](auto s) { BackwardT<true, decltype(s)>(a); });
}
const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace opf::index_mul_2d_cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::index_mul_2d_cpu {
OPF_KERNEL_EXPORT(RunForward);
OPF_KERNEL_EXPORT(RunBackward);
OPF_KERNEL_EXPORT(RunDoubleBackward);
OPF_CPU_EXPORT_TARGET()
}  // namespace opf::index_mul_2d_cpu
#endif  // HWY_ONCE

#if HWY_ONCE && OPF_HOST_PART  // the host code: not in a JIT kernels module (cpu/dispatch.h)
OPF_HOST_CODE_BEGIN
namespace opf::index_mul_2d_cpu {
using namespace opf::cpu;

// Every idx value is a row of in1; the first that is not fails the call.
void check_idx(const char* entry, const int64_t* idx, int64_t n, int64_t m) {
  for (int64_t i = 0; i < n; ++i)
    if (idx[i] < 0 || idx[i] >= m)
      failf("%s: idx[%lld] = %lld is outside [0, %lld) (the rows of in1)", entry, (long long)i, (long long)idx[i],
            (long long)m);
}

// in1 [M, F] (argument i1) and in2 [N, F] (argument i2): a 2-D float tensor each, same dtype and F.
void check_inputs(const Args& args, const opf_tensor& in1, int i1, const opf_tensor& in2, int i2) {
  const char* e = args.entry();
  for (auto [t, i, name] : {std::tuple{&in1, i1, "in1"}, std::tuple{&in2, i2, "in2"}}) {
    if (t->ndim != 2) failf("%s: argument %d (%s) has %d dims, expected 2 ([rows, F])", e, i, name, t->ndim);
    if (t->dtype != OPF_F32 && t->dtype != OPF_F16)
      failf("%s: argument %d (%s) has dtype %s, expected f32 or f16", e, i, name, dtype_str(t->dtype));
  }
  if (in2.dtype != in1.dtype)
    failf("%s: argument %d (in2) has dtype %s, in1 has %s", e, i2, dtype_str(in2.dtype), dtype_str(in1.dtype));
  if (in2.shape[1] != in1.shape[1])
    failf("%s: argument %d (in2) has F = %lld columns, in1 has %lld", e, i2, (long long)in2.shape[1],
          (long long)in1.shape[1]);
  if (in1.shape[0] == 0 && in2.shape[0] > 0)
    failf("%s: argument %d (in1) has no rows for %lld indices", e, i1, (long long)in2.shape[0]);
  for (auto [t, i, name] : {std::tuple{&in1, i1, "in1"}, std::tuple{&in2, i2, "in2"}})
    if (t->shape[0] * t->shape[1] > 0 && !t->data) failf("%s: argument %d (%s) has no data", e, i, name);
}

// call() below sorts backward's indices (per index): optimized in JIT modules too.
OPF_HOST_CODE_END

void call(const opf_call* c, bool execute) {
  const std::string_view entry = c->entry ? c->entry : "";
  if (entry == "forward") {
    const Args args(c, 4, 0);
    const opf_tensor &in1 = args.tensor(0, "in1"), &in2 = args.tensor(1, "in2");
    check_inputs(args, in1, 0, in2, 1);
    const int64_t m = in1.shape[0], f = in1.shape[1], n = in2.shape[0];
    const auto* idx = static_cast<const int64_t*>(expect_arg(args, 2, "idx", OPF_I64, {n}).data);
    void* out = expect_arg(args, 3, "out", in1.dtype, {n, f}).data;
    check_idx("forward", idx, n, m);
    if (!execute || n == 0 || f == 0) return;
    OPF_DISPATCH(RunForward)(Forward{c->host, in1.dtype, m, n, f, in1.data, in2.data, idx, out});
  } else if (entry == "backward" || entry == "double_backward") {
    // argument positions: backward (grad_out, in1, in2, idx, grad_in1, grad_in2);
    // double_backward (grad_grad_in1, grad_grad_in2, grad_out, in1, in2, idx, grad_grad_out,
    // grad_in1, grad_in2)
    const bool dbl = entry == "double_backward";
    const int o = dbl ? 2 : 0;
    const Args args(c, dbl ? 9 : 6, 0);
    const char* e = args.entry();
    const opf_tensor &in1 = args.tensor(o + 1, "in1"), &in2 = args.tensor(o + 2, "in2");
    check_inputs(args, in1, o + 1, in2, o + 2);
    const int64_t m = in1.shape[0], f = in1.shape[1], n = in2.shape[0];
    const int32_t t = in1.dtype;
    const void* grad = expect_arg(args, o, "grad_out", t, {n, f}).data;
    const void* gg1 = dbl ? expect_arg(args, 0, "grad_grad_in1", t, {m, f}).data : nullptr;
    const void* gg2 = dbl ? expect_arg(args, 1, "grad_grad_in2", t, {n, f}).data : nullptr;
    const auto* idx = static_cast<const int64_t*>(expect_arg(args, o + 3, "idx", OPF_I64, {n}).data);
    void* ggo = dbl ? expect_arg(args, 6, "grad_grad_out", t, {n, f}).data : nullptr;
    void* g1 = expect_arg(args, dbl ? 7 : 4, "grad_in1", t, {m, f}).data;
    void* g2 = expect_arg(args, dbl ? 8 : 5, "grad_in2", t, {n, f}).data;
    check_idx(e, idx, n, m);
    if (!execute || m * f == 0) return;
    // counting sort of the rows by target row: stable, so each bucket lists its rows ascending
    std::vector<int64_t> start(static_cast<size_t>(m) + 1, 0), order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ++start[size_t(idx[i]) + 1];
    for (int64_t r = 0; r < m; ++r) start[size_t(r) + 1] += start[size_t(r)];
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < n; ++i) order[size_t(next[size_t(idx[i])]++)] = i;
    if (dbl) {
      OPF_DISPATCH(RunDoubleBackward)
      (Backward{c->host, t, m, n, f, grad, gg2, gg1, in2.data, in1.data, ggo, g1, g2, start.data(), order.data()});
    } else {
      OPF_DISPATCH(RunBackward)
      (Backward{c->host, t, m, n, f, grad, in2.data, in1.data, nullptr, nullptr, nullptr, g1, g2, start.data(),
                order.data()});
    }
  } else {
    failf("unknown entry '%.40s' (index_mul_2d has forward, backward, double_backward)", c->entry ? c->entry : "");
  }
}

}  // namespace opf::index_mul_2d_cpu

OPF_DEFINE_MODULE("index_mul_2d", "cpu", opf::index_mul_2d_cpu::isa(), opf::index_mul_2d_cpu::call)
#endif  // HWY_ONCE
