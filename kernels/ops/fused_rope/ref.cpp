// fused_rope — float64 reference and case description.
//
// Contract (case shape [s, b, h, d, d2]; t [s, b, h, d] ("sbhd"), freqs f32 [s, 1, 1, d2], d2 <= d
// even, H = d2 / 2; T = f32 | f16 | bf16 storage, f32 arithmetic, one rounding to T per output):
//   c_{p,i} = T(cos f_{p,i}), s_{p,i} = T(sin f_{p,i}): cos and sin of the f32 freq, rounded to f32
//            and then to T *before* they multiply (apex: sincosf, then a cast to t's dtype). This is
//            part of the promised math, so the reference rounds them the same way (f64 -> f32 -> T,
//            the op's double rounding included) and does not hide it in a wider tolerance: for f16
//            it is an error of up to 2^-11 * |t| that an unrounded reference would have to allow.
//   forward (t, freqs) -> out, per row of d at position p ("rotate half", not interleaved):
//     out_i     = t_i c_i - t_{i+H} s_i            (i < H)
//     out_{i+H} = t_{i+H} c_{i+H} + t_i s_{i+H}
//     out_j     = t_j                              (j >= d2: copied through)
//   backward (grad_out, freqs) -> grad_t, the transposed rotation:
//     g_i       = dy_i c_i + dy_{i+H} s_{i+H}
//     g_{i+H}   = dy_{i+H} c_{i+H} - dy_i s_i
//     g_j       = dy_j                             (j >= d2)
//   *_cached: cos and sin given in T ([s, 1, 1, d2]) instead of freqs; used as stored.
//   *_cached_f32: the same with cos and sin in f32 (any T): used as given, not rounded to T.
//   *_thd: t [total, h, d] packs b sequences; cu_seqlens (i32 [b + 1], 0 = cu_0 <= ... <= cu_b =
//     total) bounds them and the position p restarts at 0 in each; freqs [s, 1, 1, d2] covers the
//     longest sequence. Here the lengths are derived from (s, b): the first s, then 1 .. s.
//   Views: t / grad_out may have any strides (a transposed bshd tensor); out / grad_t any strides
//   that do not overlap. The sweep uses dense tensors; test.cpp covers the views.
//   Non-finite values: a NaN in t_i reaches out_i and, inside the rotary part, its partner out_{i+-H};
//   a NaN in a freq reaches its column and the partner column of every row at that position.
//   *_2d (apex fused_apply_rotary_pos_emb_2d / forward_2d, backward_2d): t [b, s, h, d] ("bshd"),
//     any strides, d divisible by 4, q = d / 2, Q = q / 2; s = img_h * img_w, token k at image
//     row y = k / img_w and column x = k % img_w. cos_h, sin_h [1, H, 1, q] and cos_w, sin_w
//     [1, W, 1, q], dense, all four of one dtype: T (*_2d) or f32 (*_2d_f32, any T); used as
//     stored, f32 values unrounded (as *_cached_f32). H >= img_h, W >= img_w: rows past the image
//     are not read (apex's tables may be longer than the image). Each row of d is two rotate-half
//     rows of q: columns [0, q) by the formulas above with H -> Q and (c, s) = row y of cos_h /
//     sin_h; columns [q, d) likewise with row x of cos_w / sin_w. No pass-through columns.
//     Params img_h, img_w (i64, the only params; other entries ignore them): the image size; 0
//     takes the table's rows (H, W). img_h * img_w != s, an image larger than its table, d not
//     divisible by 4, or tables of another shape or dtype are errors naming the argument or param
//     (apex truncates d / 2 for odd d and leaves out's last column unwritten; refused here).
//     Case shape [s, b, h, d, -] (the op's shapes; d2 unused): t [b, s, h, d]; with both params
//     0 the image is the most square factorization img_h x img_w of s (img_w the largest divisor
//     <= sqrt(s)), tables exactly the image; a param the sweep sets overrides its side (and s
//     becomes img_h * img_w), and that table gets 3 rows more than the image.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "opforge/dtype.h"
#include "opforge/manifest.h"

namespace opf::ops {
namespace {

// Sequence k's length in the thd cases: the first is s (the longest), the others 1 .. s.
int64_t seq_len(int64_t s, int64_t k) { return k == 0 ? s : 1 + (k * 7 + s / 3) % s; }

bool is_thd(std::string_view entry) { return entry.ends_with("_thd"); }
bool is_cached(std::string_view entry) { return entry.find("_cached") != std::string_view::npos; }
bool is_backward(std::string_view entry) { return entry.starts_with("backward"); }
bool is_2d(std::string_view entry) { return entry.find("_2d") != std::string_view::npos; }

// 2-D cases: t [b, s, h, d] with s = img_h * img_w; tables [1, rows, 1, d / 2].
void describe_2d(CaseDesc& c, const Shape& sh, const Params& p) {
  if (sh.size() != 5 || sh[3] % 4 != 0) {
    c.unsupported = "the 2-D fused_rope entries need d divisible by 4 (two halves, each rotated half against half)";
    return;
  }
  const int64_t b = sh[1], h = sh[2], d = sh[3], ph = int64_t(p.get("img_h")), pw = int64_t(p.get("img_w"));
  int64_t img_w = 1;
  for (int64_t k = 1; k * k <= sh[0]; ++k)
    if (sh[0] % k == 0) img_w = k;
  int64_t img_h = sh[0] / img_w;
  if (ph) img_h = ph;
  if (pw) img_w = pw;
  const int64_t rows_h = img_h + (ph ? 3 : 0), rows_w = img_w + (pw ? 3 : 0), s = img_h * img_w;
  const bool bwd = is_backward(c.entry);
  const Fill values{Fill::uniform, -1.0, 1.0};
  c.set(bwd ? "grad_out" : "t", {b, s, h, d}, values);
  for (const char* n : {"cos_h", "sin_h"}) c.set(n, {1, rows_h, 1, d / 2}, values);
  for (const char* n : {"cos_w", "sin_w"}) c.set(n, {1, rows_w, 1, d / 2}, values);
  c.set(bwd ? "grad_t" : "out", {b, s, h, d});
  const double n = double(b * s) * double(h) * double(d);
  const int64_t table_cols = d / 2;  // d is even: each of the two tables covers half the head dim
  c.bytes = 2 * n * double(dtype_size(c.dtype)) +
            double(2 * (img_h + img_w) * table_cols) * double(dtype_size(c.arg("cos_h").dtype));
  c.flops = 3 * n;
  c.reduce_len = 1;
}

// One rotate-half row of w columns (half = w / 2) from x into y with cos c and sin sv.
void rotate_half(bool bwd, const double* x, const double* c, const double* sv, int64_t w, double* y) {
  const int64_t half = w / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double lo = x[i], hi = x[i + half];
    if (bwd) {
      y[i] = lo * c[i] + hi * sv[i + half];
      y[i + half] = hi * c[i + half] - lo * sv[i];
    } else {
      y[i] = lo * c[i] - hi * sv[i];
      y[i + half] = hi * c[i + half] + lo * sv[i + half];
    }
  }
}

void reference_2d(std::string_view entry, std::vector<RefArg>& a, const Params& p) {
  const bool bwd = is_backward(entry);
  const auto& in = ref_arg(a, bwd ? "grad_out" : "t");
  auto& out = ref_arg(a, bwd ? "grad_t" : "out").v;
  const auto& ch = ref_arg(a, "cos_h");
  const auto& shv = ref_arg(a, "sin_h").v;
  const auto& cw = ref_arg(a, "cos_w");
  const auto& swv = ref_arg(a, "sin_w").v;
  const int64_t s = in.desc->shape[1], h = in.desc->shape[2], d = in.desc->shape[3], q = d / 2;
  const int64_t img_w = p.get("img_w") != 0 ? int64_t(p.get("img_w")) : cw.desc->shape[1];
  const size_t rows = in.v.size() / size_t(d);
  for (size_t r = 0; r < rows; ++r) {
    const int64_t k = int64_t(r / size_t(h)) % s, y = k / img_w, x = k % img_w;
    const double* src = in.v.data() + r * size_t(d);
    double* dst = out.data() + r * size_t(d);
    rotate_half(bwd, src, ch.v.data() + y * q, shv.data() + y * q, q, dst);
    rotate_half(bwd, src + q, cw.v.data() + x * q, swv.data() + x * q, q, dst + q);
  }
}

void describe(CaseDesc& c, const Shape& sh, const Params& p) {
  if (is_2d(c.entry)) return describe_2d(c, sh, p);
  if (sh.size() != 5 || sh[4] % 2 != 0 || sh[4] > sh[3]) {
    c.unsupported = "fused_rope shapes are [s, b, h, d, d2] with d2 even and d2 <= d";
    return;
  }
  const int64_t s = sh[0], b = sh[1], h = sh[2], d = sh[3], d2 = sh[4];
  const std::string in = is_backward(c.entry) ? "grad_out" : "t", out = is_backward(c.entry) ? "grad_t" : "out";
  const Fill values{Fill::uniform, -1.0, 1.0};
  int64_t tokens = s * b;
  if (is_thd(c.entry)) {
    tokens = 0;
    for (int64_t k = 0; k < b; ++k) tokens += seq_len(s, k);
    c.set(in, {tokens, h, d}, values);
    c.set("cu_seqlens", {b + 1}, {}, /*derived=*/true);
    c.set(out, {tokens, h, d});
  } else {
    c.set(in, {s, b, h, d}, values);
    c.set(out, {s, b, h, d});
  }
  const double e = double(dtype_size(c.dtype)), n = double(tokens) * double(h) * double(d);
  if (is_cached(c.entry)) {
    c.set("cos", {s, 1, 1, d2}, values);
    c.set("sin", {s, 1, 1, d2}, values);
    c.bytes = 2 * n * e + 2 * double(s * d2) * double(dtype_size(c.arg("cos").dtype));
  } else {
    // angles of a few turns: rotations far from the identity, and sin/cos of either sign
    c.set("freqs", {s, 1, 1, d2}, {Fill::uniform, -12.0, 12.0});
    c.bytes = 2 * n * e + double(s * d2) * 4;
  }
  c.flops = 3 * double(tokens) * double(h) * double(d2);
  c.reduce_len = 1;
}

void prepare(std::string_view entry, std::vector<RefArg>& a, const Params&) {
  if (!is_thd(entry)) return;
  auto& cu = ref_arg(a, "cu_seqlens");
  const int64_t b = cu.desc->shape[0] - 1, s = ref_arg(a, "freqs").desc->shape[0];
  cu.v[0] = 0;
  for (int64_t k = 0; k < b; ++k) cu.v[size_t(k + 1)] = cu.v[size_t(k)] + double(seq_len(s, k));
}

// v as the op holds it: f32, then T.
double round_to(DType t, double v) {
  const float f = float(v);
  switch (t) {
    case DType::f16: return f16_to_f32(f32_to_f16(f));
    case DType::bf16: return bf16_to_f32(f32_to_bf16(f));
    default: return f;
  }
}

void reference(std::string_view entry, std::vector<RefArg>& a, const Params& p) {
  if (is_2d(entry)) return reference_2d(entry, a, p);
  const bool bwd = is_backward(entry);
  const auto& in = ref_arg(a, bwd ? "grad_out" : "t");
  auto& out = ref_arg(a, bwd ? "grad_t" : "out").v;
  const DType t = in.desc->dtype;
  const int64_t d = in.desc->shape.back();
  const int64_t s = is_cached(entry) ? ref_arg(a, "cos").desc->shape[0] : ref_arg(a, "freqs").desc->shape[0];
  const int64_t d2 = is_cached(entry) ? ref_arg(a, "cos").desc->shape[3] : ref_arg(a, "freqs").desc->shape[3];
  const int64_t half = d2 / 2;
  std::vector<double> cs(size_t(s * d2)), sn(size_t(s * d2));
  if (is_cached(entry)) {
    cs = ref_arg(a, "cos").v;
    sn = ref_arg(a, "sin").v;
  } else {
    const auto& f = ref_arg(a, "freqs").v;
    for (size_t k = 0; k < f.size(); ++k) {
      cs[k] = round_to(t, std::cos(f[k]));
      sn[k] = round_to(t, std::sin(f[k]));
    }
  }
  // rows of d in memory order, each with its position
  std::vector<int64_t> pos;
  if (is_thd(entry)) {
    const auto& cu = ref_arg(a, "cu_seqlens").v;
    const int64_t h = in.desc->shape[1];
    for (size_t k = 0; k + 1 < cu.size(); ++k)
      for (int64_t tok = int64_t(cu[k]); tok < int64_t(cu[k + 1]); ++tok)
        for (int64_t j = 0; j < h; ++j) pos.push_back(tok - int64_t(cu[k]));
  } else {
    const int64_t bh = in.desc->shape[1] * in.desc->shape[2];
    for (int64_t p = 0; p < s; ++p)
      for (int64_t j = 0; j < bh; ++j) pos.push_back(p);
  }
  for (size_t r = 0; r < pos.size(); ++r) {
    const double* x = in.v.data() + r * size_t(d);
    double* y = out.data() + r * size_t(d);
    const double* c = cs.data() + pos[r] * d2;
    const double* sv = sn.data() + pos[r] * d2;
    for (int64_t i = 0; i < half; ++i) {
      const double lo = x[i], hi = x[i + half];
      if (bwd) {
        y[i] = lo * c[i] + hi * sv[i + half];
        y[i + half] = hi * c[i + half] - lo * sv[i];
      } else {
        y[i] = lo * c[i] - hi * sv[i];
        y[i + half] = hi * c[i + half] + lo * sv[i + half];
      }
    }
    for (int64_t j = d2; j < d; ++j) y[j] = x[j];
  }
}

}  // namespace

extern const OpSpec fused_rope_spec{describe, prepare, reference};

}  // namespace opf::ops
