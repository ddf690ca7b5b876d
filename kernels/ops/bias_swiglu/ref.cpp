// bias_swiglu — float64 reference and case description.
//
// Contract (case shape [N, H]; x [N, 2H], bias [2H], y [N, H]; T = f32 | f16 | bf16 storage,
// f32 arithmetic, one rounding to T per output):
//   forward (x: T, bias: T) -> (y: T)
//     a = x[:, j] + bias[j], c = x[:, H + j] + bias[H + j]   (j < H)
//     y = silu(a) * c,  silu(a) = a * s(a),  s(a) = 1 / (1 + exp(-a))
//   backward (dy: T [N, H], x: T, bias: T) -> (dx: T [N, 2H], dbias: T [2H])
//     dx[:, j]     = dy * s(a) * (1 + a * (1 - s(a))) * c     (d/da)
//     dx[:, H + j] = dy * silu(a)                            (d/dc)
//     dbias[k]     = sum over the N rows of dx[:, k], summed from the f32 dx before its rounding
//                    to T (N = 0: dbias = 0). The same bits for any thread count: rows are summed
//                    in blocks fixed by N alone (cpu/parallel.h parallel_column_sums).
//   Where opforge departs from apex (ROCm's fused_bias_swiglu, the only one): apex computes in T
//   itself (f16 products and expf results rounded to f16 at every step) and leaves dbias to the
//   caller (dx.sum(0), an extra pass over dx); here the math is f32 and dbias comes from the same
//   pass. The kernel forms s(a) and 1 - s(a) from exp(-|a|), without cancellation or overflow
//   (apex's expf(-a) overflows for a < -88: its s is then 0 by luck of 1/inf, and its 1 - s
//   cancels for large a); exp(-|a|) below f32's normal range (|a| > 87) is taken as 0, so the
//   saturated sides are exactly s = 0 (silu = -0, d silu = 0) and s = 1 (silu = a, d silu = 1).
//   bf16 runs too (apex has no bf16 kernel): storage only, the math is the same f32.
//   Non-finite values: a NaN in x, bias or dy reaches exactly the outputs whose formula uses it
//   (its y/dx element pair and its dbias column).
//   No params.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "opforge/manifest.h"

namespace opf::ops {
namespace {

void describe(CaseDesc& c, const Shape& s, const Params&) {
  if (s.size() != 2) {
    c.unsupported = "bias_swiglu shapes are [N, H] (x is [N, 2H])";
    return;
  }
  const int64_t n = s[0], h = s[1];
  const double e = double(dtype_size(c.dtype)), nh = double(n) * double(h);
  // Ranges that keep every variant's outputs inside f16 where they can be (the sweep skips a
  // variant whose reference leaves the dtype's range): |a|, |c| <= 2.5 at the base range
  c.set("x", {n, 2 * h}, {Fill::uniform, -2.0, 2.0});
  c.set("bias", {2 * h}, {Fill::uniform, -0.5, 0.5});
  if (c.entry == "forward") {
    c.set("y", {n, h});
    c.bytes = (3 * nh + 2 * double(h)) * e;
    c.flops = 8 * nh;
    c.reduce_len = 1;
  } else {
    c.set("dy", {n, h}, {Fill::uniform, -0.25, 0.25});
    c.set("dx", {n, 2 * h});
    c.set("dbias", {2 * h});
    c.bytes = (5 * nh + 4 * double(h)) * e;
    c.flops = 16 * nh;
    c.reduce_len = std::max<int64_t>(n, 1);  // dbias sums N rows
  }
}

double sigmoid(double a) { return 1.0 / (1.0 + std::exp(-a)); }

void reference(std::string_view entry, std::vector<RefArg>& args, const Params&) {
  if (entry == "forward") {
    const auto& x = ref_arg(args, "x");
    const auto& bias = ref_arg(args, "bias").v;
    auto& y = ref_arg(args, "y").v;
    const int64_t n = x.desc->shape[0], h = x.desc->shape[1] / 2;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < h; ++j) {
        const double a = x.v[r * 2 * h + j] + bias[j], c = x.v[r * 2 * h + h + j] + bias[h + j];
        y[r * h + j] = a * sigmoid(a) * c;
      }
    return;
  }
  const auto& dy = ref_arg(args, "dy").v;
  const auto& x = ref_arg(args, "x");
  const auto& bias = ref_arg(args, "bias").v;
  auto& dx = ref_arg(args, "dx").v;
  auto& dbias = ref_arg(args, "dbias").v;
  const int64_t n = x.desc->shape[0], h = x.desc->shape[1] / 2;
  std::fill(dbias.begin(), dbias.end(), 0.0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < h; ++j) {
      const double a = x.v[r * 2 * h + j] + bias[j], c = x.v[r * 2 * h + h + j] + bias[h + j];
      const double g = dy[r * h + j], s = sigmoid(a);
      const double da = g * s * (1 + a * (1 - s)) * c, dc = g * a * s;
      dx[r * 2 * h + j] = da;
      dx[r * 2 * h + h + j] = dc;
      dbias[j] += da;
      dbias[h + j] += dc;
    }
}

}  // namespace

extern const OpSpec bias_swiglu_spec{describe, nullptr, reference};

}  // namespace opf::ops
