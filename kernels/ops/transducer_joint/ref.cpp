// transducer_joint — float64 reference and case description (apex.contrib.transducer
// TransducerJoint, transducer_joint_cuda).
//
// Contract (shape [B, T, U, H]; T = f32 | f16 | bf16 storage, f32 math):
//   forward (f: T [B,T,H], g: T [B,U,H], f_len: i32 [B], g_len: i32 [B], batch_offset: i64 [B],
//            mask: u8) -> (h: T)
//     valid (b, t, u): t < f_len[b] and u < g_len[b]
//     s = f[b,t,:] + g[b,u,:]   (one f32 add of the stored values)
//     relu: r = (s < 0 ? 0 : s), so a NaN stays NaN (as torch.relu); else r = s
//     dropout_prob p = 0: h = r, rounded once to T; the mask is not read (see Dropout below).
//     p > 0: h = r * m, one f32 multiply of the f32 r, rounded once to T, with
//       m = mask[row, c] != 0 ? scale : 0 and scale = 1 / (1 - p) computed in f64, rounded to f32.
//       A multiply, as torch's dropout (x * mask * scale): a dropped NaN or inf gives NaN, a
//       dropped negative r gives -0.
//     packed = false: h is [B, T, U, H]; every element of the don't-care region (t >= f_len[b] or
//       u >= g_len[b]) is written as -1, as apex does: a defined value (never stale memory) that
//       the loss never reads, and one that an accidental read shows up as. Dropout does not touch it.
//     packed = true: h is [batch_offset[B-1], H]; batch b's valid rows are stacked t-major at
//       row batch_offset[b] - f_len[b]*g_len[b] + t*g_len[b] + u (apex's packing). No don't-care rows.
//   backward (grad_h: T, f, g, f_len, g_len, batch_offset, mask) -> (grad_f: T [B,T,H], grad_g: T [B,U,H])
//     d(b,t,u,c) = grad_h[b,t,u,c] * m   (one f32 multiply, the forward's m; p = 0: d = grad_h)
//     x = relu && f[b,t,c] + g[b,u,c] <= 0 ? 0 : d   (torch's dropout backward, then
//       threshold_backward on the forward's ReLU output: NaN passes the gradient; recomputed from
//       f and g, so no ReLU mask is saved)
//     grad_f[b,t,c] = sum over u < g_len[b], ascending u, of x   (t < f_len[b])
//     grad_g[b,u,c] = sum over t < f_len[b], ascending t, of x   (u < g_len[b])
//     f32 sums in that order, rounded once to T: the bits depend on the data alone, never on the
//     thread count. grad_f rows t >= f_len[b] and grad_g rows u >= g_len[b] are 0; grad_h's
//     don't-care region is never read. Without relu f and g are not read (still checked).
//   Dropout (apex's dropout / dropout_prob): the caller passes the keep mask, u8 (NumPy bool),
//     nonzero = keep, in h's layout ([B, T, U, H] unpacked, [rows, H] packed), and gives the
//     backward the same mask: results are reproducible and testable, whatever RNG drew the mask.
//     Only the valid positions of the mask are read (its unpacked don't-care region is not).
//     With dropout_prob = 0 there is no dropout and the mask is never read: it may have h's layout
//     (contents ignored, the bits equal those of a call without dropout) or be empty, shape [0].
//     apex draws the mask itself (Philox) and saves keep & (s > 0), the ReLU folded in, for its
//     backward; here the ReLU is recomputed from f and g, so the same keep mask serves both entries
//     (apex's folded mask passed here with relu gives the same gradient, except where s is NaN).
//   dropout_mask (f, g, f_len, g_len, batch_offset) -> (mask: u8, h's layout), params
//     dropout_prob p, seed: a keep mask for the entries above, drawn by a counter-based RNG so that
//     its bits depend on (seed, p, lengths, H) alone: never on threads, layout or call order.
//     Valid element (b, t, u, c) has the number n = (P[b] + t * g_len[b] + u) * H + c, P[b] the
//     sum of f_len * g_len over the batches before b (its packed row numbering, for both layouts).
//     w = word n % 4 of Philox4x32-10(counter = {n / 4 low 32 bits, n / 4 high 32 bits, 0, 0},
//     key = {seed low 32 bits, seed high 32 bits}) (Salmon et al. 2011, Random123's round
//     constants); mask = w < (1 - p) * 2^32 (compared in f64) ? 1 : 0. The unpacked don't-care
//     region is 0. f and g only give T, U and H (not read). The bits are not apex's or torch's
//     (their Philox streams are numbered by CUDA thread).
//   Lengths: f_len[b] in [0, T], g_len[b] in [0, U], else the call fails with one line naming
//     the first bad position ("forward: f_len[3] = 9 is outside [0, 8] (T of f)") before any
//     output is written. Packed: batch_offset must be the inclusive cumsum of f_len*g_len
//     (checked, first bad position named) and h / grad_h must have exactly batch_offset[B-1] rows.
//     Unpacked, batch_offset is not read (apex ignores it too) but must have shape [B].
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

// The lengths of a case, derived from the shape so that describe() knows the packed row count:
// batch 0 has the full lengths (every position valid somewhere), the others a hash of b spread
// over [0, n], zero included.
int64_t length_of(int64_t b, int64_t n, uint64_t salt) {
  if (b == 0) return n;
  uint64_t x = uint64_t(b) * 0x9E3779B97F4A7C15ull + salt;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return int64_t(x % uint64_t(n + 1));
}
int64_t f_length(int64_t b, int64_t t) { return length_of(b, t, 1); }
int64_t g_length(int64_t b, int64_t u) { return length_of(b, u, 2); }

// m for a kept element (the contract's scale: 1 / (1 - p) in f64, rounded once to f32)
double dropout_scale(double p) { return double(float(1.0 / (1.0 - p))); }

// Philox4x32-10 of (counter, key), word k of the block
uint32_t philox_word(uint64_t block, uint64_t key, int k) {
  uint32_t x[4] = {uint32_t(block), uint32_t(block >> 32), 0, 0};
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(0xD2511F53u) * x[0], p1 = uint64_t(0xCD9E8D57u) * x[2];
    const uint32_t y[4] = {uint32_t(p1 >> 32) ^ x[1] ^ k0, uint32_t(p1), uint32_t(p0 >> 32) ^ x[3] ^ k1, uint32_t(p0)};
    for (int i = 0; i < 4; ++i) x[i] = y[i];
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return x[k];
}

// Without dropout the mask is never read: the empty form, so that no case carries a dead tensor.
void set_mask(CaseDesc& c, const Shape& hshape, double drop) {
  c.set("mask", drop > 0 ? hshape : Shape{0}, {Fill::mask, 0, 1, 1.0 - drop});
}

void describe(CaseDesc& c, const Shape& s, const Params& p) {
  if (s.size() != 4 || s[0] < 0 || s[1] < 0 || s[2] < 0 || s[3] < 0) {
    c.unsupported = "transducer_joint shapes are [B, T, U, H]";
    return;
  }
  const int64_t b = s[0], t = s[1], u = s[2], h = s[3];
  const bool packed = p.flag("packed"), relu = p.flag("relu");
  const double drop = p.get("dropout_prob");
  int64_t valid = 0;  // rows of the packed h: sum of f_len * g_len
  for (int64_t i = 0; i < b; ++i) valid += f_length(i, t) * g_length(i, u);
  const Shape hshape = packed ? Shape{valid, h} : Shape{b, t, u, h};
  const double e = double(dtype_size(c.dtype)), fg = double(b) * double(t + u) * double(h) * e;
  c.set("f", {b, t, h}, {Fill::uniform, -1.0, 1.0});
  c.set("g", {b, u, h}, {Fill::uniform, -1.0, 1.0});
  c.set("f_len", {b}, {}, /*derived=*/true);
  c.set("g_len", {b}, {}, /*derived=*/true);
  c.set("batch_offset", {b}, {}, /*derived=*/true);
  const double mbytes = drop > 0 ? double(valid) * double(h) : 0.0;  // u8, its valid positions
  const double mflops = drop > 0 ? double(valid) * double(h) : 0.0;
  const double lens = 16.0 * double(b);
  const double hbytes = double(packed ? valid * h : b * t * u * h) * e;
  if (c.entry == "dropout_mask") {
    c.set("mask", hshape);
    c.reduce_len = 1;
    c.bytes = hbytes / e + lens;  // the u8 mask out (f and g not read)
    c.flops = 0;
    return;
  }
  if (c.entry == "forward") {
    c.set("h", hshape);
    c.reduce_len = 1;
    set_mask(c, hshape, drop);
    c.bytes = fg + hbytes + lens + mbytes;  // f, g in (each once), h out, the mask's valid part in
    c.flops = double(valid) * double(h) * (relu ? 2 : 1) + mflops;
  } else {
    c.set("grad_h", hshape, {Fill::uniform, -1.0, 1.0});
    set_mask(c, hshape, drop);
    c.set("grad_f", {b, t, h});
    c.set("grad_g", {b, u, h});
    c.reduce_len = std::max<int64_t>(std::max(t, u), 1);
    // the valid grad_h rows (and mask positions) in; f, g in with relu; grad_f, grad_g out
    c.bytes = double(valid) * double(h) * e + (relu ? 2 : 1) * fg + lens + mbytes;
    c.flops = double(valid) * double(h) * (relu ? 4 : 2) + mflops;
  }
}

void prepare(std::string_view, std::vector<RefArg>& a, const Params&) {
  const int64_t t = ref_arg(a, "f").desc->shape[1], u = ref_arg(a, "g").desc->shape[1];
  auto& fl = ref_arg(a, "f_len").v;
  auto& gl = ref_arg(a, "g_len").v;
  auto& off = ref_arg(a, "batch_offset").v;
  double sum = 0;
  for (size_t b = 0; b < fl.size(); ++b) {
    fl[b] = double(f_length(int64_t(b), t));
    gl[b] = double(g_length(int64_t(b), u));
    sum += fl[b] * gl[b];
    off[b] = sum;
  }
}

void reference(std::string_view entry, std::vector<RefArg>& a, const Params& p) {
  const RefArg& f = ref_arg(a, "f");
  const RefArg& g = ref_arg(a, "g");
  const auto& fl = ref_arg(a, "f_len").v;
  const auto& gl = ref_arg(a, "g_len").v;
  const int64_t nb = f.desc->shape[0], nt = f.desc->shape[1], nu = g.desc->shape[1], nh = f.desc->shape[2];
  const bool packed = p.flag("packed"), relu = p.flag("relu");
  const double drop = p.get("dropout_prob"), scale = dropout_scale(drop);
  auto& mask = ref_arg(a, "mask").v;
  for (int64_t b = 0; b < nb; ++b) {
    const double lf = fl[size_t(b)], lg = gl[size_t(b)];
    if (!(lf >= 0 && lf <= double(nt)) || !(lg >= 0 && lg <= double(nu)))
      throw Error("transducer_joint reference: batch " + std::to_string(b) + " has lengths outside [0, T] x [0, U]");
  }
  // row of (b, t, u) in h / grad_h; -1 for a don't-care position of a packed tensor
  std::vector<int64_t> base(size_t(nb), 0);
  for (int64_t b = 1; b < nb; ++b)
    base[size_t(b)] = base[size_t(b - 1)] + int64_t(fl[size_t(b - 1)] * gl[size_t(b - 1)]);
  const int64_t rows =
      packed ? (nb ? base[size_t(nb - 1)] + int64_t(fl[size_t(nb - 1)] * gl[size_t(nb - 1)]) : 0) : nb * nt * nu;
  if (drop > 0 && mask.size() != size_t(rows * nh))
    throw Error("transducer_joint reference: the mask does not have h's layout");
  auto row = [&](int64_t b, int64_t t, int64_t u) -> int64_t {
    const int64_t lf = int64_t(fl[size_t(b)]), lg = int64_t(gl[size_t(b)]);
    if (!packed) return (b * nt + t) * nu + u;
    return t < lf && u < lg ? base[size_t(b)] + t * lg + u : -1;
  };
  if (entry == "dropout_mask") {
    const uint64_t seed = uint64_t(p.get_int("seed"));
    const double keep = (1.0 - drop) * 4294967296.0;
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t t = 0; t < nt; ++t)
        for (int64_t u = 0; u < nu; ++u) {
          const int64_t r = row(b, t, u);
          if (r < 0) continue;
          const bool valid = t < int64_t(fl[size_t(b)]) && u < int64_t(gl[size_t(b)]);
          const uint64_t n0 = uint64_t((base[size_t(b)] + t * int64_t(gl[size_t(b)]) + u) * nh);
          for (int64_t c = 0; c < nh; ++c) {
            const uint64_t n = n0 + uint64_t(c);
            mask[size_t(r * nh + c)] = valid && double(philox_word(n / 4, seed, int(n % 4))) < keep ? 1.0 : 0.0;
          }
        }
    return;
  }
  auto sum = [&](int64_t b, int64_t t, int64_t u, int64_t c) {
    return f.v[size_t((b * nt + t) * nh + c)] + g.v[size_t((b * nu + u) * nh + c)];
  };
  // the dropout factor of element c of row r (a valid position)
  auto m = [&](int64_t r, int64_t c) { return drop > 0 ? (mask[size_t(r * nh + c)] != 0 ? scale : 0.0) : 1.0; };
  if (entry == "forward") {
    auto& h = ref_arg(a, "h").v;
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t t = 0; t < nt; ++t)
        for (int64_t u = 0; u < nu; ++u) {
          const int64_t r = row(b, t, u);
          if (r < 0) continue;
          const bool valid = t < int64_t(fl[size_t(b)]) && u < int64_t(gl[size_t(b)]);
          for (int64_t c = 0; c < nh; ++c) {
            const double s = sum(b, t, u, c);
            h[size_t(r * nh + c)] = !valid ? -1.0 : (relu && s < 0 ? 0.0 : s) * m(r, c);
          }
        }
    return;
  }
  const auto& dh = ref_arg(a, "grad_h").v;
  auto& df = ref_arg(a, "grad_f").v;
  auto& dg = ref_arg(a, "grad_g").v;
  std::fill(df.begin(), df.end(), 0.0);
  std::fill(dg.begin(), dg.end(), 0.0);
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t t = 0; t < int64_t(fl[size_t(b)]); ++t)
      for (int64_t u = 0; u < int64_t(gl[size_t(b)]); ++u) {
        const int64_t r = row(b, t, u);
        for (int64_t c = 0; c < nh; ++c) {
          const double x = relu && sum(b, t, u, c) <= 0 ? 0.0 : dh[size_t(r * nh + c)] * m(r, c);
          df[size_t((b * nt + t) * nh + c)] += x;
          dg[size_t((b * nu + u) * nh + c)] += x;
        }
      }
}

}  // namespace

extern const OpSpec transducer_joint_spec{describe, prepare, reference};

}  // namespace opf::ops
