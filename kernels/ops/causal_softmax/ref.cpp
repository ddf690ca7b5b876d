// causal_softmax — float64 reference and case description.
//
// Contract (x [attn_batches, sq, sk] with sq == sk, softmax over sk; T = f32 | f16 | bf16
// storage, f32 accumulation; row i of a batch is its query position):
//   forward (x: T) -> (y: T)
//     y_ij = exp(z_ij - max_k z_ik) / sum_{k<=i} exp(z_ik - max_k z_ik) for j <= i, z = scale * x,
//            max over k <= i;  y_ij = 0 exactly for j > i (the future keys).
//     Entries with j > i are never read: any value there, NaN or inf included, changes nothing.
//     NaN: a NaN kept score, or a kept maximum of +-inf, makes the kept part y_i,0..i NaN (as
//       PyTorch's softmax after masked_fill(-inf)); the masked part stays exactly 0 even then.
//       A kept score of -inf beside finite ones is an ordinary 0 weight.
//     Row 0 keeps one column: y = 1 there, whatever its (finite) score.
//   backward (dy: T inout, y: T in) -> dy overwritten with dx
//     dx_ij = scale * y_ij * (dy_ij - sum_{k<=i} dy_ik y_ik)  for j <= i;  dx_ij = 0 for j > i.
//     Why the sum stops at the diagonal, and dy is not read for j > i: y_ij (j > i) is the constant
//       0, so no dy there can reach dx. apex instead forms y * dy over the whole row (0 * dy
//       above the diagonal), so an inf or NaN gradient for a future key — which a caller may leave
//       there, as those outputs are unused — turns its row of dx into NaN. opforge follows the
//       mathematical gradient: such a row stays finite, and its masked part exactly 0.
//     y's masked part (0 in a forward output) is not read either.
//   sq != sk is refused (apex's contract; the Python side reshapes [b, np, sq, sk] to
//   [b*np, sq, sk]). apex's CUDA/ROCm launch limits (sk <= 16384, attn_batches divisible by the
//   rows per block) do not apply: any size runs here.
//   param: scale.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "opforge/manifest.h"

namespace opf::ops {
namespace {

// The value v takes once stored in dtype t (what a kernel reads back).
double stored(DType t, double v) {
  switch (t) {
    case DType::f32: return double(float(v));
    case DType::f16: return double(f16_to_f32(f32_to_f16(float(v))));
    case DType::bf16: return double(bf16_to_f32(f32_to_bf16(float(v))));
    default: return v;
  }
}

void describe(CaseDesc& c, const Shape& s, const Params&) {
  if (s.size() != 3 || s[1] != s[2]) {
    c.unsupported = "causal_softmax shapes are [attn_batches, sq, sk] with sq == sk";
    return;
  }
  const int64_t b = s[0], sq = s[1], sk = s[2];
  const double e = double(dtype_size(c.dtype)), n = double(b) * double(sq) * double(sk);
  const double kept = double(b) * double(sq) * double(sq + 1) / 2;  // the lower triangle, diagonal included
  if (c.entry == "forward") {
    // scale * x spans [-5, 5] at the default scale: realistic attention logits
    c.set("x", {b, sq, sk}, {Fill::uniform, -40.0, 40.0});
    c.set("y", {b, sq, sk});
    c.bytes = kept * e + n * e;  // the kept scores in; every output, zeros included, out
    c.flops = 6 * kept;
  } else {
    c.set("dy", {b, sq, sk}, {Fill::uniform, -1.0, 1.0});
    // derived: prepare() draws logits in [lo, hi] from dy and stores their causal softmax
    c.set("y", {b, sq, sk}, {Fill::uniform, -6.0, 2.0}, true);
    c.bytes = 2 * kept * e + n * e;
    c.flops = 5 * kept;
  }
  c.reduce_len = sk;
}

// A uniform [0, 1) number determined by a drawn value and its position (splitmix64 of its bits):
// prepare() has no generator of its own, so derived inputs inherit the case's seed through the
// drawn values they are computed from.
double uniform_from(double v, int64_t i) {
  uint64_t z;
  std::memcpy(&z, &v, sizeof z);
  z += 0x9e3779b97f4a7c15ull * uint64_t(i + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return double(z >> 11) * 0x1p-53;
}

void prepare(std::string_view entry, std::vector<RefArg>& a, const Params&) {
  if (entry != "backward") return;
  // y = the causal softmax of logits in [fill.lo, fill.hi] drawn from dy, stored in T; 0 above
  // the diagonal, as the forward leaves it
  const auto& dy = a[0];
  auto& y = a[1];
  const double lo = y.desc->fill.lo, hi = y.desc->fill.hi;
  const int64_t sq = y.desc->shape[1], sk = y.desc->shape[2], rows = y.desc->shape[0] * sq;
  for (int64_t r = 0; r < rows; ++r) {
    double* yr = &y.v[r * sk];
    const int64_t keep = r % sq + 1;
    for (int64_t k = 0; k < keep; ++k) yr[k] = lo + (hi - lo) * uniform_from(dy.v[r * sk + k], r * sk + k);
    const double mx = *std::max_element(yr, yr + keep);
    double sum = 0;
    for (int64_t k = 0; k < keep; ++k) sum += (yr[k] = std::exp(yr[k] - mx));
    for (int64_t k = 0; k < keep; ++k) yr[k] = stored(y.desc->dtype, yr[k] / sum);
    std::fill(yr + keep, yr + sk, 0.0);
  }
}

void reference(std::string_view entry, std::vector<RefArg>& a, const Params& p) {
  const double scale = p.get("scale");
  const auto& shape = a[0].desc->shape;
  const int64_t sq = shape[1], sk = shape[2], rows = shape[0] * sq;
  if (entry == "forward") {
    const auto& x = a[0].v;
    auto& y = a[1].v;
    std::vector<double> z(static_cast<size_t>(sk));
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t keep = r % sq + 1;
      double* yr = &y[r * sk];
      for (int64_t k = 0; k < keep; ++k) z[k] = scale * x[r * sk + k];
      std::fill(yr + keep, yr + sk, 0.0);
      const bool nan = std::any_of(z.begin(), z.begin() + keep, [](double v) { return std::isnan(v); });
      const double mx = *std::max_element(z.begin(), z.begin() + keep);
      if (nan || std::isinf(mx)) {  // inf - inf: no defined weights (PyTorch: NaN)
        std::fill(yr, yr + keep, std::nan(""));
        continue;
      }
      double sum = 0;
      for (int64_t k = 0; k < keep; ++k) sum += (z[k] = std::exp(z[k] - mx));
      for (int64_t k = 0; k < keep; ++k) yr[k] = z[k] / sum;
    }
    return;
  }
  auto& dy = a[0].v;
  const auto& y = a[1].v;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t keep = r % sq + 1;
    double* d = &dy[r * sk];
    const double* yr = &y[r * sk];
    double dot = 0;
    for (int64_t k = 0; k < keep; ++k) dot += d[k] * yr[k];
    for (int64_t k = 0; k < keep; ++k) d[k] = scale * yr[k] * (d[k] - dot);
    std::fill(d + keep, d + sk, 0.0);
  }
}

}  // namespace

extern const OpSpec causal_softmax_spec{describe, prepare, reference};

}  // namespace opf::ops
