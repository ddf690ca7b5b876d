// layer_norm — float64 reference and case description.
//
// Contract (shape [rows, cols], normalised over cols; T = f32 | f16 | bf16 storage, f32 accumulation):
//   forward (x, gamma, beta) -> (y, mean, rstd)
//     mean = (1/cols) sum x,  var = (1/cols) sum (x - mean)^2   (population variance)
//     rstd = 1 / sqrt(var + eps)   -- eps inside the sqrt
//     y    = (x - mean) * rstd * gamma + beta                   (y: T; mean, rstd: f32 [rows])
//     The affine part is computed in f32 and rounded once (torch semantics), not rounded to T
//     before the gamma multiply as apex does.
//   backward (dy, x, mean, rstd, gamma) -> (dx, dgamma, dbeta)
//     xhat = (x - mean) * rstd
//     dbeta_j  = sum_i dy_ij,  dgamma_j = sum_i dy_ij xhat_ij          (T [cols])
//     dx_ij = (rstd_i / cols) * (cols*g_ij - sum_k g_ik - xhat_ij * sum_k g_ik xhat_ik),  g = gamma*dy
//   mean and rstd passed to backward are the saved f32 forward statistics (the reference uses
//   them as given, so the comparison measures the backward kernel alone).
//   rows = 0 is valid (backward: dgamma = dbeta = 0).
#include <algorithm>
#include <cmath>

#include "opforge/manifest.h"

namespace opf::ops {
namespace {

void describe(CaseDesc& c, const Shape& s, const Params&) {
  if (s.size() != 2) {
    c.unsupported = "layer_norm shapes are [rows, cols]";
    return;
  }
  const int64_t rows = s[0], cols = s[1];
  const double e = double(dtype_size(c.dtype)), n = double(rows) * double(cols);
  if (c.entry == "forward") {
    c.set("x", {rows, cols}, {Fill::uniform, -3.0, 5.0});
    c.set("gamma", {cols}, {Fill::uniform, 0.5, 1.5});
    c.set("beta", {cols}, {Fill::uniform, -1.0, 1.0});
    c.set("y", {rows, cols});
    c.set("mean", {rows});
    c.set("rstd", {rows});
    c.reduce_len = cols;
    c.bytes = 2 * n * e + 2.0 * cols * e + 8.0 * rows;
    c.flops = 8 * n;
  } else {
    c.set("dy", {rows, cols}, {Fill::uniform, -1.0, 1.0});
    c.set("x", {rows, cols}, {Fill::uniform, -3.0, 5.0});
    c.set("mean", {rows}, {}, true);
    c.set("rstd", {rows}, {}, true);
    c.set("gamma", {cols}, {Fill::uniform, 0.5, 1.5});
    c.set("dx", {rows, cols});
    c.set("dgamma", {cols});
    c.set("dbeta", {cols});
    c.reduce_len = std::max(rows, cols);
    c.bytes = 3 * n * e + 3.0 * cols * e + 8.0 * rows;
    c.flops = 12 * n;
  }
}

// Saved statistics for backward: the forward's f32 mean/rstd of the (stored) x.
void prepare(std::string_view entry, std::vector<RefArg>& a, const Params& p) {
  if (entry != "backward") return;
  const auto& x = a[1];
  const int64_t rows = x.desc->shape[0], cols = x.desc->shape[1];
  const double eps = p.get("eps");
  for (int64_t i = 0; i < rows; ++i) {
    double m = 0, v = 0;
    for (int64_t j = 0; j < cols; ++j) m += x.v[i * cols + j];
    m /= double(cols);
    for (int64_t j = 0; j < cols; ++j) v += (x.v[i * cols + j] - m) * (x.v[i * cols + j] - m);
    v /= double(cols);
    a[2].v[i] = double(float(m));  // stored as f32
    a[3].v[i] = double(float(1.0 / std::sqrt(v + eps)));
  }
}

void reference(std::string_view entry, std::vector<RefArg>& a, const Params& p) {
  const int64_t rows = a[0].desc->shape[0], cols = a[0].desc->shape[1];
  if (entry == "forward") {
    const auto &x = a[0].v, &g = a[1].v, &b = a[2].v;
    auto &y = a[3].v, &mean = a[4].v, &rstd = a[5].v;
    const double eps = p.get("eps");
    for (int64_t i = 0; i < rows; ++i) {
      const double* xi = &x[i * cols];
      double m = 0, v = 0;
      for (int64_t j = 0; j < cols; ++j) m += xi[j];
      m /= double(cols);
      for (int64_t j = 0; j < cols; ++j) v += (xi[j] - m) * (xi[j] - m);
      v /= double(cols);
      const double r = 1.0 / std::sqrt(v + eps);
      for (int64_t j = 0; j < cols; ++j) y[i * cols + j] = (xi[j] - m) * r * g[j] + b[j];
      mean[i] = m;
      rstd[i] = r;
    }
    return;
  }
  const auto &dy = a[0].v, &x = a[1].v, &mean = a[2].v, &rstd = a[3].v, &g = a[4].v;
  auto &dx = a[5].v, &dg = a[6].v, &db = a[7].v;
  std::fill(dg.begin(), dg.end(), 0.0);
  std::fill(db.begin(), db.end(), 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    double sum_g = 0, sum_gx = 0;
    for (int64_t j = 0; j < cols; ++j) {
      const double xhat = (x[i * cols + j] - mean[i]) * rstd[i], gdy = g[j] * dy[i * cols + j];
      sum_g += gdy;
      sum_gx += gdy * xhat;
      dg[j] += dy[i * cols + j] * xhat;
      db[j] += dy[i * cols + j];
    }
    for (int64_t j = 0; j < cols; ++j) {
      const double xhat = (x[i * cols + j] - mean[i]) * rstd[i], gdy = g[j] * dy[i * cols + j];
      dx[i * cols + j] = rstd[i] / double(cols) * (double(cols) * gdy - sum_g - xhat * sum_gx);
    }
  }
}

}  // namespace

extern const OpSpec layer_norm_spec{describe, prepare, reference};

}  // namespace opf::ops
