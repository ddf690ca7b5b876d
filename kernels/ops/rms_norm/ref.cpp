// rms_norm — float64 reference and case description.
//
// Contract (shape [rows, cols], normalised over cols; T = f32 | f16 | bf16 storage, f32 accumulation):
//   forward (x, gamma) -> (y, rstd)
//     ms   = (1/cols) sum x^2
//     rstd = 1 / sqrt(ms + eps)    -- eps inside the sqrt
//     y    = x * rstd * gamma      (y: T; rstd: f32 [rows]); computed in f32, rounded once
//   backward (dy, x, rstd, gamma) -> (dx, dgamma)
//     xhat = x * rstd,  g = gamma * dy
//     dgamma_j = sum_i dy_ij xhat_ij                                   (T [cols])
//     dx_ij = (rstd_i / cols) * (cols*g_ij - xhat_ij * sum_k g_ik xhat_ik)
//   rstd passed to backward is the saved f32 forward statistic (used as given).
//   rows = 0 is valid (backward: dgamma = 0).
#include <algorithm>
#include <cmath>

#include "opforge/manifest.h"

namespace opf::ops {
namespace {

void describe(CaseDesc& c, const Shape& s, const Params&) {
  if (s.size() != 2) {
    c.unsupported = "rms_norm shapes are [rows, cols]";
    return;
  }
  const int64_t rows = s[0], cols = s[1];
  const double e = double(dtype_size(c.dtype)), n = double(rows) * double(cols);
  if (c.entry == "forward") {
    c.set("x", {rows, cols}, {Fill::uniform, -2.0, 3.0});
    c.set("gamma", {cols}, {Fill::uniform, 0.5, 1.5});
    c.set("y", {rows, cols});
    c.set("rstd", {rows});
    c.reduce_len = cols;
    c.bytes = 2 * n * e + double(cols) * e + 4.0 * rows;
    c.flops = 4 * n;
  } else {
    c.set("dy", {rows, cols}, {Fill::uniform, -1.0, 1.0});
    c.set("x", {rows, cols}, {Fill::uniform, -2.0, 3.0});
    c.set("rstd", {rows}, {}, true);
    c.set("gamma", {cols}, {Fill::uniform, 0.5, 1.5});
    c.set("dx", {rows, cols});
    c.set("dgamma", {cols});
    c.reduce_len = std::max(rows, cols);
    c.bytes = 3 * n * e + 2.0 * double(cols) * e + 4.0 * rows;
    c.flops = 8 * n;
  }
}

// Saved statistic for backward: the forward's rstd of the (stored) x, rounded to f32.
void prepare(std::string_view entry, std::vector<RefArg>& a, const Params& p) {
  if (entry != "backward") return;
  const auto& x = a[1];
  const int64_t rows = x.desc->shape[0], cols = x.desc->shape[1];
  const double eps = p.get("eps");
  for (int64_t i = 0; i < rows; ++i) {
    double ms = 0;
    for (int64_t j = 0; j < cols; ++j) ms += x.v[i * cols + j] * x.v[i * cols + j];
    a[2].v[i] = double(float(1.0 / std::sqrt(ms / double(cols) + eps)));
  }
}

void reference(std::string_view entry, std::vector<RefArg>& a, const Params& p) {
  const int64_t rows = a[0].desc->shape[0], cols = a[0].desc->shape[1];
  if (entry == "forward") {
    const auto &x = a[0].v, &g = a[1].v;
    auto &y = a[2].v, &rstd = a[3].v;
    const double eps = p.get("eps");
    for (int64_t i = 0; i < rows; ++i) {
      const double* xi = &x[i * cols];
      double ms = 0;
      for (int64_t j = 0; j < cols; ++j) ms += xi[j] * xi[j];
      const double r = 1.0 / std::sqrt(ms / double(cols) + eps);
      for (int64_t j = 0; j < cols; ++j) y[i * cols + j] = xi[j] * r * g[j];
      rstd[i] = r;
    }
    return;
  }
  const auto &dy = a[0].v, &x = a[1].v, &rstd = a[2].v, &g = a[3].v;
  auto &dx = a[4].v, &dg = a[5].v;
  std::fill(dg.begin(), dg.end(), 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    double sum_gx = 0;
    for (int64_t j = 0; j < cols; ++j) {
      const double xhat = x[i * cols + j] * rstd[i];
      sum_gx += g[j] * dy[i * cols + j] * xhat;
      dg[j] += dy[i * cols + j] * xhat;
    }
    for (int64_t j = 0; j < cols; ++j) {
      const double xhat = x[i * cols + j] * rstd[i];
      dx[i * cols + j] = rstd[i] / double(cols) * (double(cols) * g[j] * dy[i * cols + j] - xhat * sum_gx);
    }
  }
}

}  // namespace

extern const OpSpec rms_norm_spec{describe, prepare, reference};

}  // namespace opf::ops
