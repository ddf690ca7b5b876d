// index_mul_2d — float64 reference and case description (apex.contrib.index_mul_2d,
// fused_index_mul_2d).
//
// Contract (shape [M, N, F]; T = f32 | f16 storage as apex, f32 math):
//   forward (in1: T [M,F], in2: T [N,F], idx: i64 [N]) -> (out: T [N,F])
//     out[i,:] = in1[idx[i],:] * in2[i,:]                 (one f32 product, rounded once to T)
//   backward (grad_out: T [N,F], in1: T [M,F], in2: T [N,F], idx: i64 [N])
//       -> (grad_in1: T [M,F], grad_in2: T [N,F])
//     grad_in2[i,:] = grad_out[i,:] * in1[idx[i],:]
//     grad_in1[m,:] = sum over the rows i with idx[i] = m, in ascending i, of grad_out[i,:] * in2[i,:]
//       (f32 products added into an f32 sum in that order, rounded once to T; 0 for a row m no i
//       points to). apex scatter-adds with atomics (f16 atomics for half): a different sum order,
//       and different bits, on every run; here the order is fixed by the data alone, so the bits
//       are the same for any thread count and any task split.
//   double_backward (grad_grad_in1: T [M,F], grad_grad_in2: T [N,F], grad_out: T [N,F], in1: T [M,F],
//       in2: T [N,F], idx: i64 [N]) -> (grad_grad_out: T [N,F], grad_in1: T [M,F], grad_in2: T [N,F])
//     apex's index_mul_2d_backward_backward, the backward of backward (gg1 = grad_grad_in1 etc.):
//     grad_grad_out[i,:] = gg1[idx[i],:] * in2[i,:] + gg2[i,:] * in1[idx[i],:]   (two f32 products,
//                                                                               one f32 add)
//     grad_in2[i,:]      = gg1[idx[i],:] * grad_out[i,:]
//     grad_in1[m,:]      = sum over i with idx[i] = m, ascending i, of gg2[i,:] * grad_out[i,:]
//   idx: every value must be in [0, M). Otherwise the call fails with one line naming the first
//     bad position ("forward: idx[17] = 1000 is outside [0, 1000) (the rows of in1)") before any
//     output is written; no row of in1 is ever read out of bounds. M = 0 is valid only with N = 0.
//   N = 0 or F = 0: nothing to compute (backward still zeroes grad_in1).
//   NaN / inf propagate elementwise as the float64 formula (a NaN in grad_out[i,c] makes
//   grad_in1[idx[i],c] NaN).
//   Dense row-major tensors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "opforge/error.h"
#include "opforge/manifest.h"

namespace opf::ops {
namespace {

// Expected number of distinct rows of in1 that N uniform indices in [0, M) touch: the rows an
// ideal kernel must read.
double touched_rows(double m, double n) {
  if (m <= 0 || n <= 0) return 0;
  return m * -std::expm1(n * std::log1p(-1.0 / m));
}

void describe(CaseDesc& c, const Shape& s, const Params&) {
  if (s.size() != 3 || s[0] < 1 || s[1] < 0 || s[2] < 0) {
    c.unsupported = "index_mul_2d shapes are [M, N, F] with M >= 1";
    return;
  }
  const int64_t m = s[0], n = s[1], f = s[2];
  const double e = double(dtype_size(c.dtype)), nf = double(n) * double(f);
  const double gathered = (m == 1 && n > 0 ? 1.0 : touched_rows(double(m), double(n))) * double(f) * e;
  const Fill rows{Fill::index, 0.0, double(m)};
  if (c.entry == "forward") {
    c.set("in1", {m, f}, {Fill::uniform, -1.0, 1.0});
    c.set("in2", {n, f}, {Fill::uniform, -1.0, 1.0});
    c.set("idx", {n}, rows);
    c.set("out", {n, f});
    c.reduce_len = 1;
    c.bytes = 2 * nf * e + gathered + 8.0 * double(n);  // in2 in, out out, the in1 rows used, idx
    c.flops = nf;
  } else if (c.entry == "double_backward") {
    c.set("grad_grad_in1", {m, f}, {Fill::uniform, -1.0, 1.0});
    c.set("grad_grad_in2", {n, f}, {Fill::uniform, -1.0, 1.0});
    c.set("grad_out", {n, f}, {Fill::uniform, -1.0, 1.0});
    c.set("in1", {m, f}, {Fill::uniform, -1.0, 1.0});
    c.set("in2", {n, f}, {Fill::uniform, -1.0, 1.0});
    c.set("idx", {n}, rows);
    c.set("grad_grad_out", {n, f});
    c.set("grad_in1", {m, f});
    c.set("grad_in2", {n, f});
    c.reduce_len = std::max<int64_t>(n, 1);
    // gg2, grad_out, in2 in, grad_grad_out and grad_in2 out; the gg1 and in1 rows used; grad_in1 out
    c.bytes = 5 * nf * e + 2 * gathered + double(m) * double(f) * e + 8.0 * double(n);
    c.flops = 6 * nf;
  } else {
    c.set("grad_out", {n, f}, {Fill::uniform, -1.0, 1.0});
    c.set("in1", {m, f}, {Fill::uniform, -1.0, 1.0});
    c.set("in2", {n, f}, {Fill::uniform, -1.0, 1.0});
    c.set("idx", {n}, rows);
    c.set("grad_in1", {m, f});
    c.set("grad_in2", {n, f});
    c.reduce_len = std::max<int64_t>(n, 1);  // a bound: the longest bucket depends on the drawn idx
    // grad_out, in2 in, grad_in2 out; the in1 rows used; grad_in1 out; idx
    c.bytes = 3 * nf * e + gathered + double(m) * double(f) * e + 8.0 * double(n);
    c.flops = 3 * nf;
  }
}

int64_t row_of(const RefArg& idx, int64_t i, int64_t m) {
  const double v = idx.v[size_t(i)];
  if (!(v >= 0 && v < double(m)))
    throw Error("index_mul_2d reference: idx[" + std::to_string(i) + "] = " + std::to_string(int64_t(v)) +
                " is outside [0, " + std::to_string(m) + ")");
  return int64_t(v);
}

void reference(std::string_view entry, std::vector<RefArg>& a, const Params&) {
  const RefArg& in1 = ref_arg(a, "in1");
  const RefArg& in2 = ref_arg(a, "in2");
  const RefArg& idx = ref_arg(a, "idx");
  const int64_t m = in1.desc->shape[0], f = in1.desc->shape[1], n = in2.desc->shape[0];
  if (entry == "forward") {
    auto& out = ref_arg(a, "out").v;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = row_of(idx, i, m);
      for (int64_t c = 0; c < f; ++c) out[size_t(i * f + c)] = in1.v[size_t(r * f + c)] * in2.v[size_t(i * f + c)];
    }
    return;
  }
  const auto& g = ref_arg(a, "grad_out").v;
  auto& g1 = ref_arg(a, "grad_in1").v;
  auto& g2 = ref_arg(a, "grad_in2").v;
  std::fill(g1.begin(), g1.end(), 0.0);
  if (entry == "double_backward") {
    const auto& gg1 = ref_arg(a, "grad_grad_in1").v;
    const auto& gg2 = ref_arg(a, "grad_grad_in2").v;
    auto& ggo = ref_arg(a, "grad_grad_out").v;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = row_of(idx, i, m);
      for (int64_t c = 0; c < f; ++c) {
        const size_t at = size_t(i * f + c), src = size_t(r * f + c);
        ggo[at] = gg1[src] * in2.v[at] + gg2[at] * in1.v[src];
        g2[at] = gg1[src] * g[at];
        g1[src] += gg2[at] * g[at];
      }
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = row_of(idx, i, m);
    for (int64_t c = 0; c < f; ++c) {
      const size_t at = size_t(i * f + c);
      g1[size_t(r * f + c)] += g[at] * in2.v[at];
      g2[at] = g[at] * in1.v[size_t(r * f + c)];
    }
  }
}

}  // namespace

extern const OpSpec index_mul_2d_spec{describe, nullptr, reference};

}  // namespace opf::ops
