// softmax_xentropy — float64 reference and case description (NVIDIA apex's xentropy_cuda, the
// fused softmax cross entropy with label smoothing of apex.contrib.xentropy).
//
// Contract (shape [N, C]: N rows of C class logits; T = f32 | f16 | bf16 storage, f32 accumulation):
//   forward (logits: T [N,C], labels: i64 [N]) -> (losses: f32 [N], max_log_sum_exp: acc [N])
//     per row, y = labels[row], s = smoothing:
//       lse  = m + log sum_c exp(x_c - m),  m = max_c x_c
//       loss = lse - (1-s) x_y - (s/C) sum_c x_c
//     losses and max_log_sum_exp are f32 for every T (acc): apex's half_to_float=True. The saved
//     lse feeds backward, whose exp(x - lse) would lose its mass if lse were rounded to f16/bf16.
//     The kernel evaluates loss = log S + (1-s)(m - x_y) - (s/C) sum_c (x_c - m), S = sum exp(x-m):
//     the same value, as a sum of non-negative terms (no cancellation for large-offset logits).
//   backward (grad_losses: f32 [N], logits: T [N,C], max_log_sum_exp: acc [N], labels: i64 [N])
//       -> (grad_logits: T [N,C])
//     dx_c = g (exp(x_c - lse) - (1-s) [c == y] - s/C),  g = grad_losses[row], lse as saved
//     The saved lse is an f32: its rounding (<= ulp(lse)/2) scales the softmax by up to
//     exp(ulp(lse)/2), nothing at ordinary magnitudes, but at |logits| ~ 1e30 it has lost log C
//     altogether (apex's format has the same limit; the loss itself stays exact there).
//   padding_idx (any integer, default 0 as apex's Python wrapper): a row whose label equals it is
//     padding: loss 0 and an all-zero gradient row (exact zeros, even where its logits or g are
//     NaN: apex masks the loss and the incoming gradient with masked_fill). Its max_log_sum_exp is
//     still written, computed like any other row's (apex's kernel writes it too; the wrapper
//     masks only the loss). A padding_idx outside [0, C) (e.g. -100) works: such labels are never
//     used as indices.
//   labels: every label must be padding_idx or in [0, C). Otherwise the call fails with one line
//     naming the first bad row ("forward: labels[17] = 1000 is outside [0, 1000) and is not
//     padding_idx 0") before any output is written; no logit is ever read out of bounds.
//   NaN / inf: a NaN logit makes its row's lse and loss NaN (forward) and its gradient row NaN
//     (backward, through the NaN lse the forward saved), as the float64 formula; other rows are
//     unaffected. A row whose max is +-inf (a +inf logit, or every logit -inf) is NaN likewise
//     (inf - inf). Padding rows keep loss 0 / gradient 0 (see above). A NaN grad_losses entry
//     makes its (non-padding) gradient row NaN.
//     -inf logits in a row with a finite max are ordinary: exp(-inf) = 0; with s > 0 the loss is
//     +inf (smoothing puts weight on them), with s = 0 it is plain cross entropy (the smoothing
//     sum is not evaluated, so no 0 * inf). Backward assumes the saved lse (no logit above it).
//   N = 0 is valid (nothing to do); C >= 1.
//   params: smoothing in [0, 1), padding_idx.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "opforge/error.h"
#include "opforge/manifest.h"

namespace opf::ops {
namespace {

void describe(CaseDesc& c, const Shape& s, const Params&) {
  if (s.size() != 2 || s[1] < 1) {
    c.unsupported = "softmax_xentropy shapes are [N, C] with C >= 1";
    return;
  }
  const int64_t rows = s[0], cols = s[1];
  const double e = double(dtype_size(c.dtype)), n = double(rows) * double(cols);
  // labels: derived, so that prepare() can plant padding rows (label_for below)
  const Fill labels{Fill::index, 0.0, double(cols)};
  if (c.entry == "forward") {
    c.set("logits", {rows, cols}, {Fill::uniform, -8.0, 8.0});  // language-model-like logits
    c.set("labels", {rows}, labels, true);
    c.set("losses", {rows});
    c.set("max_log_sum_exp", {rows});
    c.reduce_len = cols;
    c.bytes = n * e + 16.0 * double(rows);  // logits once; labels in, loss and lse out
    c.flops = 5 * n;                        // max, sub, exp, two sums
  } else {
    // small (a mean-reduced loss gives 1/N): the `large` variant (x 2^20) still fits f16 outputs
    c.set("grad_losses", {rows}, {Fill::uniform, -0x1p-5, 0x1p-5});
    c.set("logits", {rows, cols}, {Fill::uniform, -8.0, 8.0});
    c.set("max_log_sum_exp", {rows}, {}, true);  // derived: the forward's lse of these logits
    c.set("labels", {rows}, labels, true);
    c.set("grad_logits", {rows, cols});
    c.reduce_len = 1;                           // lse is given: every gradient element is elementwise in the inputs
    c.bytes = 2 * n * e + 16.0 * double(rows);  // logits in, gradient out; g, lse, labels
    c.flops = 5 * n;                            // sub, exp, sub, mul, the label select
  }
}

// A uniform [0, 1) number determined by a drawn value and its position (splitmix64 of its bits):
// derived inputs inherit the case's seed through the drawn values they are computed from.
double uniform_from(double v, int64_t i) {
  uint64_t z;
  std::memcpy(&z, &v, sizeof z);
  z += 0x9e3779b97f4a7c15ull * uint64_t(i + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return double(z >> 11) * 0x1p-53;
}

// Labels for the sweep: row 1 and every row % 16 == 4 are padding (label = padding_idx, whatever
// its value: negative and >= C padding indices are exercised too; rows 4, 20, ... also carry the
// `nan` variant's NaN, row 1 does not); the others uniform in [0, C), seeded by the row's first
// logit. ~6% padding rows in the benchmarks (a padding row costs less: no exp in backward).
void plant_labels(const RefArg& logits, RefArg& labels, int64_t padding_idx) {
  const int64_t rows = logits.desc->shape[0], cols = logits.desc->shape[1];
  for (int64_t r = 0; r < rows; ++r) {
    if (r == 1 || r % 16 == 4) {
      labels.v[size_t(r)] = double(padding_idx);
      continue;
    }
    const int64_t y = int64_t(uniform_from(logits.v[size_t(r * cols)], r) * double(cols));
    labels.v[size_t(r)] = double(std::min(y, cols - 1));
  }
}

bool is_padding(double label, int64_t padding_idx) { return int64_t(label) == padding_idx; }

int64_t checked_label(double label, int64_t row, int64_t cols, int64_t padding_idx) {
  const int64_t y = int64_t(label);
  if (y < 0 || y >= cols)
    throw Error("softmax_xentropy reference: labels[" + std::to_string(row) + "] = " + std::to_string(y) +
                " is outside [0, " + std::to_string(cols) + ") and is not padding_idx " + std::to_string(padding_idx));
  return y;
}

// lse of one row in float64; NaN when the row holds a NaN or its max is infinite.
double row_lse(const double* x, int64_t cols) {
  if (std::any_of(x, x + cols, [](double v) { return std::isnan(v); })) return std::nan("");
  const double m = *std::max_element(x, x + cols);
  double sum = 0;
  for (int64_t c = 0; c < cols; ++c) sum += std::exp(x[c] - m);
  return m + std::log(sum);
}

void prepare(std::string_view entry, std::vector<RefArg>& a, const Params& p) {
  const int64_t pad = p.get_int("padding_idx");
  const RefArg& logits = ref_arg(a, "logits");
  plant_labels(logits, ref_arg(a, "labels"), pad);
  if (entry != "backward") return;
  // the saved lse, as the forward stores it (f32)
  RefArg& lse = ref_arg(a, "max_log_sum_exp");
  const int64_t rows = logits.desc->shape[0], cols = logits.desc->shape[1];
  for (int64_t r = 0; r < rows; ++r) lse.v[size_t(r)] = double(float(row_lse(&logits.v[size_t(r * cols)], cols)));
}

void reference(std::string_view entry, std::vector<RefArg>& a, const Params& p) {
  const double s = p.get("smoothing");
  const int64_t pad = p.get_int("padding_idx");
  const RefArg& logits = ref_arg(a, "logits");
  const auto& labels = ref_arg(a, "labels").v;
  const int64_t rows = logits.desc->shape[0], cols = logits.desc->shape[1];
  if (entry == "forward") {
    auto& loss = ref_arg(a, "losses").v;
    auto& lse = ref_arg(a, "max_log_sum_exp").v;
    for (int64_t r = 0; r < rows; ++r) {
      const double* x = &logits.v[size_t(r * cols)];
      lse[size_t(r)] = row_lse(x, cols);
      if (is_padding(labels[size_t(r)], pad)) {
        loss[size_t(r)] = 0.0;
        continue;
      }
      const int64_t y = checked_label(labels[size_t(r)], r, cols, pad);
      // lse - (1-s) x_y - (s/C) sum x, shifted by m: exactly 0 for C = 1 (the literal form
      // rounds to ~1e-16 there). s = 0 is plain cross entropy, also for rows with -inf logits
      // (the smoothing sum is not evaluated: no 0 * inf).
      const double m = std::isnan(lse[size_t(r)]) ? lse[size_t(r)] : *std::max_element(x, x + cols);
      double smooth = 0;
      if (s != 0)
        for (int64_t c = 0; c < cols; ++c) smooth += x[c] - m;
      loss[size_t(r)] = (lse[size_t(r)] - m) + (1 - s) * (m - x[y]) - s / double(cols) * smooth;
    }
    return;
  }
  const auto& g = ref_arg(a, "grad_losses").v;
  const auto& lse = ref_arg(a, "max_log_sum_exp").v;
  auto& dx = ref_arg(a, "grad_logits").v;
  for (int64_t r = 0; r < rows; ++r) {
    const double* x = &logits.v[size_t(r * cols)];
    double* d = &dx[size_t(r * cols)];
    if (is_padding(labels[size_t(r)], pad)) {
      std::fill(d, d + cols, 0.0);
      continue;
    }
    const int64_t y = checked_label(labels[size_t(r)], r, cols, pad);
    for (int64_t c = 0; c < cols; ++c)
      d[c] = g[size_t(r)] * (std::exp(x[c] - lse[size_t(r)]) - (c == y ? 1 - s : 0.0) - s / double(cols));
  }
}

}  // namespace

extern const OpSpec softmax_xentropy_spec{describe, prepare, reference};

}  // namespace opf::ops
