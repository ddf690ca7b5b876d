// scaled_masked_softmax — float64 reference and case description.
//
// Contract (shape [b, np, sq, sk], softmax over sk; T = f32 | f16 | bf16 storage, f32 accumulation):
//   forward (x: T [b,np,sq,sk], mask: u8 [b,1,sq,sk]) -> (y: T [b,np,sq,sk])
//     z_k = scale * x_k, or -10000 where mask_k != 0 (masked; the mask row is shared by all np heads)
//     y_k = exp(z_k - max z) / sum_j exp(z_j - max z)
//     Fully masked row (every mask entry of the row nonzero): y = 0 for the whole row.
//       Why: such a row has no admissible key, so the sound output is "no attention" — NVIDIA apex
//       zeroes it; the ROCm fork yields a uniform 1/sk row. The kernel decides from the mask
//       itself, not from max z == -10000 as apex does, which would also zero a row whose unmasked
//       scaled scores are themselves <= -10000.
//       Partially masked rows keep apex's -10000 fill (not -inf): a masked entry gets
//       exp(-10000 - max z), which is 0 in f32 unless the unmasked scores are near -10000 too.
//     NaN: an unmasked NaN score, or max z = +-inf, makes the whole row NaN (as PyTorch); a NaN
//       under the mask is ignored (the entry is -10000 whatever x holds).
//   backward (dy: T inout, y: T in) -> dy overwritten with dx
//     dx_k = scale * (dy_k * y_k - y_k * sum_j dy_j y_j)      (y: the saved forward output)
//     A fully masked row (y = 0) gets dx = 0. The mask is not an input.
//   param: scale.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "opforge/manifest.h"

namespace opf::ops {
namespace {

constexpr double kMaskedScore = -10000.0;

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
  if (s.size() != 4) {
    c.unsupported = "scaled_masked_softmax shapes are [b, np, sq, sk]";
    return;
  }
  const int64_t b = s[0], np = s[1], sq = s[2], sk = s[3];
  const double e = double(dtype_size(c.dtype)), n = double(b) * double(np) * double(sq) * double(sk);
  if (c.entry == "forward") {
    // scale * x spans [-5, 5] at the default scale: realistic attention logits
    c.set("x", {b, np, sq, sk}, {Fill::uniform, -40.0, 40.0});
    // derived: prepare() draws it from x (p = fill.p) and plants the edge-case rows
    c.set("mask", {b, 1, sq, sk}, {Fill::mask, 0, 1, 0.25}, true);
    c.set("y", {b, np, sq, sk});
    c.bytes = 2 * n * e + double(b) * double(sq) * double(sk);
    c.flops = 6 * n;
  } else {
    c.set("dy", {b, np, sq, sk}, {Fill::uniform, -1.0, 1.0});
    // derived: prepare() draws logits in [lo, hi] from dy and stores their softmax
    c.set("y", {b, np, sq, sk}, {Fill::uniform, -6.0, 2.0}, true);
    c.bytes = 3 * n * e;
    c.flops = 5 * n;
  }
  c.reduce_len = sk;
}

// Rows with an edge-case mask, at fixed positions so that every case with more than one mask row
// has them: row % 5 == 1 fully masked, row % 5 == 3 a single unmasked entry.
bool row_fully_masked(int64_t row) { return row % 5 == 1; }
bool row_single_unmasked(int64_t row) { return row % 5 == 3; }

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
  if (entry == "forward") {
    // mask[b, 0, s, k] from x[b, 0, s, k]: masked with probability fill.p, plus the edge rows
    const auto& x = a[0];
    auto& mask = a[1];
    const int64_t np = x.desc->shape[1], sq = x.desc->shape[2], sk = x.desc->shape[3];
    const int64_t rows = mask.desc->shape[0] * sq;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t bi = r / sq, si = r % sq;
      const double* xr = &x.v[((bi * np) * sq + si) * sk];
      double* m = &mask.v[r * sk];
      for (int64_t k = 0; k < sk; ++k) m[k] = uniform_from(xr[k], r * sk + k) < mask.desc->fill.p ? 1.0 : 0.0;
      if (row_fully_masked(r) || row_single_unmasked(r)) std::fill(m, m + sk, 1.0);
      if (row_single_unmasked(r)) m[(r * 7) % sk] = 0.0;
    }
    return;
  }
  // backward: y = softmax of logits in [fill.lo, fill.hi] drawn from dy (stored in T); the rows
  // a fully masked forward row would give are zero
  const auto& dy = a[0];
  auto& y = a[1];
  const double lo = y.desc->fill.lo, hi = y.desc->fill.hi;
  const int64_t sk = y.desc->shape[3], rows = int64_t(y.v.size()) / sk;
  for (int64_t r = 0; r < rows; ++r) {
    double* yr = &y.v[r * sk];
    if (row_fully_masked(r)) {
      std::fill(yr, yr + sk, 0.0);
      continue;
    }
    for (int64_t k = 0; k < sk; ++k) yr[k] = lo + (hi - lo) * uniform_from(dy.v[r * sk + k], r * sk + k);
    const double mx = *std::max_element(yr, yr + sk);
    double sum = 0;
    for (int64_t k = 0; k < sk; ++k) sum += (yr[k] = std::exp(yr[k] - mx));
    for (int64_t k = 0; k < sk; ++k) yr[k] = stored(y.desc->dtype, yr[k] / sum);
  }
}

void reference(std::string_view entry, std::vector<RefArg>& a, const Params& p) {
  const double scale = p.get("scale");
  const auto& shape = a[0].desc->shape;
  const int64_t np = shape[1], sq = shape[2], sk = shape[3], rows = shape[0] * np * sq;
  if (entry == "forward") {
    const auto &x = a[0].v, &mask = a[1].v;
    auto& y = a[2].v;
    std::vector<double> z(static_cast<size_t>(sk));
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t bi = r / (np * sq), si = r % sq;
      const double* m = &mask[(bi * sq + si) * sk];
      double* yr = &y[r * sk];
      if (std::all_of(m, m + sk, [](double v) { return v != 0.0; })) {
        std::fill(yr, yr + sk, 0.0);
        continue;
      }
      for (int64_t k = 0; k < sk; ++k) z[k] = m[k] != 0.0 ? kMaskedScore : scale * x[r * sk + k];
      const double mx = *std::max_element(z.begin(), z.end());
      double sum = 0;
      for (int64_t k = 0; k < sk; ++k) sum += (z[k] = std::exp(z[k] - mx));
      for (int64_t k = 0; k < sk; ++k) yr[k] = z[k] / sum;
    }
    return;
  }
  auto& dy = a[0].v;
  const auto& y = a[1].v;
  for (int64_t r = 0; r < rows; ++r) {
    double* d = &dy[r * sk];
    const double* yr = &y[r * sk];
    double dot = 0;
    for (int64_t k = 0; k < sk; ++k) dot += d[k] * yr[k];
    for (int64_t k = 0; k < sk; ++k) d[k] = scale * yr[k] * (d[k] - dot);
  }
}

}  // namespace

extern const OpSpec scaled_masked_softmax_spec{describe, prepare, reference};

}  // namespace opf::ops
