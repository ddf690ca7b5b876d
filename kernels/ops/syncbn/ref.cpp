// syncbn — float64 reference and case description (apex SyncBatchNorm's optimized kernels).
//
// Case shape [N, C, HW]: NCHW entries take x [N, C, HW] (H*W flattened); the _c_last entries take
// the channels-last tensor flattened to x [M, C], M = N*HW (apex's view(-1, C)). Statistics are
// per channel c over the N*HW values of that channel; T = f32 | f16 | bf16 storage, f32 statistics.
//   welford[_c_last] (x) -> (mean, var_biased)      mean_c, M2_c / n  (n = N*HW)
//   welford_parallel (mean_all [K, C], var_all [K, C], count_all [K], running_mean, running_var)
//       -> (mean, invstd), running stats updated in place.
//       Chan's merge of K shards (M2_k = var_k * n_k): n = sum n_k, mean = sum n_k mean_k / n,
//       M2 = sum (M2_k + n_k (mean_k - mean)^2); invstd = 1 / sqrt(M2 / n + eps);
//       running_x <- (1 - momentum) running_x + momentum stat, with the unbiased M2 / (n - 1).
//       Counts are floats (apex all-gathers them as such): each finite, integral, >= 0, total > 1.
//   forward[_c_last] (x, mean, invstd, weight, bias) -> y = (x - mean) invstd weight + bias
//   forward_z_c_last (x, z, mean, invstd, weight, bias) -> y = (x - mean) invstd weight + bias + z
//       (apex's residual); fuse_relu (both channels-last forwards): y = 0 where y <= 0 (NaN stays).
//   relu_backward[_z]_c_last (dy, x, [z,] mean, invstd, weight, bias) -> dy_masked = 0 where the
//       forward's pre-ReLU value (recomputed from x and z: no saved mask) is <= 0, else dy.
//   backward_reduce[_c_last] (dy, x, mean, invstd) -> sum_dy = sum dy, sum_dy_xmu = sum dy (x - mean),
//       grad_weight = sum_dy_xmu invstd, grad_bias = sum_dy (local to the shard: DDP all-reduces them)
//   backward_elemt[_c_last] (dy, x, mean, invstd, weight, sum_dy, sum_dy_xmu, count_all)
//       -> dx = (dy - sum_dy / n - (x - mean) invstd^2 sum_dy_xmu / n) weight invstd, n = sum count_all
//   Single process: welford, welford_parallel with K = 1, forward; backward_reduce, backward_elemt
//   with count_all = [N*HW]. Multi-rank: all-gather the welford outputs, all-reduce sum_dy and
//   sum_dy_xmu between the two backward entries.
// weight, bias and their gradients are f32 whatever T is (apex's mixed fp16-input / fp32-param
// layer). N*HW = 0 is valid for the reductions (empty sums are 0; welford then gives mean 0,
// var 0, count 0, which Chan's merge skips).
#include <algorithm>
#include <cmath>
#include <string>

#include "opforge/manifest.h"

namespace opf::ops {
namespace {

bool c_last(std::string_view entry) { return entry.ends_with("_c_last"); }

void describe(CaseDesc& c, const Shape& s, const Params& p) {
  if (s.size() != 3) {
    c.unsupported = "syncbn shapes are [N, C, HW]";
    return;
  }
  const int64_t n = s[0], ch = s[1], hw = s[2], m = n * hw;
  const double e = double(dtype_size(c.dtype)), el = double(m) * double(ch), cf = double(ch);
  const Shape xs = c_last(c.entry) ? Shape{m, ch} : Shape{n, ch, hw};
  const Fill fx{Fill::uniform, -1.0, 3.0};
  const std::string_view entry = c.entry;
  if (entry == "welford_parallel") {
    const int64_t k = n;  // shards
    c.set("mean_all", {k, ch}, {Fill::uniform, -1.0, 3.0});
    c.set("var_all", {k, ch}, {Fill::uniform, 0.25, 2.0});
    c.set("count_all", {k}, {Fill::index, 2.0, 1000.0});
    c.set("running_mean", {ch}, {Fill::uniform, -1.0, 1.0});
    c.set("running_var", {ch}, {Fill::uniform, 0.5, 2.0});
    c.set("mean", {ch});
    c.set("invstd", {ch});
    c.bytes = (2.0 * double(k) * cf + double(k) + 6 * cf) * 4;
    c.flops = 10.0 * double(k) * cf;
    c.reduce_len = std::max<int64_t>(k, 1);
    return;
  }
  c.set(entry.starts_with("welford") || entry.starts_with("forward") ? "x" : "dy", xs, fx);
  const bool z = entry.ends_with("_z_c_last");
  if (z) c.set("z", xs, {Fill::uniform, -1.0, 1.0});
  if (entry.starts_with("welford")) {
    c.set("mean", {ch});
    c.set("var_biased", {ch});
    c.bytes = el * e + 8 * cf;
    c.flops = 4 * el;
    c.reduce_len = std::max<int64_t>(m, 1);
    return;
  }
  if (!entry.starts_with("forward")) c.set("x", xs, fx);
  c.set("mean", {ch}, {}, true);
  c.set("invstd", {ch}, {}, true);
  if (entry.starts_with("forward")) {
    c.set("weight", {ch}, {Fill::uniform, 0.5, 1.5});
    c.set("bias", {ch}, {Fill::uniform, -1.0, 1.0});
    c.set("y", xs);
    c.bytes = (z ? 3 : 2) * el * e + 16 * cf;
    c.flops = (3 + (z ? 1 : 0) + (c_last(entry) && p.flag("fuse_relu") ? 1 : 0)) * el;
    c.reduce_len = 1;
  } else if (entry.starts_with("relu_backward")) {
    c.set("weight", {ch}, {Fill::uniform, 0.5, 1.5});
    c.set("bias", {ch}, {Fill::uniform, -1.0, 1.0});
    c.set("dy_masked", xs);
    c.bytes = (z ? 4 : 3) * el * e + 16 * cf;
    c.flops = (z ? 5 : 4) * el;
    c.reduce_len = 1;
  } else if (entry.starts_with("backward_reduce")) {
    c.set("sum_dy", {ch});
    c.set("sum_dy_xmu", {ch});
    c.set("grad_weight", {ch});
    c.set("grad_bias", {ch});
    c.bytes = 2 * el * e + 24 * cf;
    c.flops = 4 * el;
    c.reduce_len = std::max<int64_t>(m, 1);
  } else {
    c.set("weight", {ch}, {Fill::uniform, 0.5, 1.5});
    c.set("sum_dy", {ch}, {}, true);
    c.set("sum_dy_xmu", {ch}, {}, true);
    c.set("count_all", {1}, {}, true);
    c.set("dx", xs);
    c.bytes = 3 * el * e + 20 * cf;
    c.flops = 5 * el;
    c.reduce_len = std::max<int64_t>(m, 1);  // sum_dy / n and sum_dy_xmu / n cancel against dy
  }
}

// Per-channel views of x: element i of channel c, for either layout.
struct Layout {
  int64_t n, ch, hw;
  bool last;
  int64_t count() const { return n * hw; }
  int64_t at(int64_t c, int64_t i) const {
    return last ? i * ch + c : (i / std::max<int64_t>(hw, 1)) * ch * hw + c * hw + i % std::max<int64_t>(hw, 1);
  }
};

Layout layout_of(std::string_view entry, const RefArg& x) {
  const Shape& s = x.desc->shape;
  if (c_last(entry)) return {s[0], s[1], 1, true};
  return {s[0], s[1], s[2], false};
}

void stats(const Layout& L, const std::vector<double>& x, int64_t c, double& mean, double& var) {
  const int64_t n = L.count();
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[L.at(c, i)];
  mean = n > 0 ? s / double(n) : 0.0;
  double m2 = 0;
  for (int64_t i = 0; i < n; ++i) m2 += (x[L.at(c, i)] - mean) * (x[L.at(c, i)] - mean);
  var = n > 0 ? m2 / double(n) : 0.0;
}

// The saved statistics the forward and backward entries take: the f32 ones of the drawn x.
void prepare(std::string_view entry, std::vector<RefArg>& a, const Params& p) {
  if (entry.starts_with("welford")) return;
  const RefArg& x = ref_arg(a, "x");
  const Layout L = layout_of(entry, x);
  auto& mean = ref_arg(a, "mean").v;
  auto& invstd = ref_arg(a, "invstd").v;
  const double eps = p.get("eps");
  for (int64_t c = 0; c < L.ch; ++c) {
    double m, v;
    stats(L, x.v, c, m, v);
    mean[c] = double(float(m));
    invstd[c] = double(float(1.0 / std::sqrt(v + eps)));
  }
  if (!entry.starts_with("backward_elemt")) return;
  const auto& dy = ref_arg(a, "dy").v;
  auto& sum_dy = ref_arg(a, "sum_dy").v;
  auto& sum_dy_xmu = ref_arg(a, "sum_dy_xmu").v;
  for (int64_t c = 0; c < L.ch; ++c) {
    double s = 0, sx = 0;
    for (int64_t i = 0; i < L.count(); ++i) {
      s += dy[L.at(c, i)];
      sx += dy[L.at(c, i)] * (x.v[L.at(c, i)] - mean[c]);
    }
    sum_dy[c] = double(float(s));
    sum_dy_xmu[c] = double(float(sx));
  }
  ref_arg(a, "count_all").v[0] = double(L.count());
}

void merge(std::vector<RefArg>& a, const Params& p) {
  const auto& mean_all = ref_arg(a, "mean_all");
  const auto& var_all = ref_arg(a, "var_all").v;
  const auto& count = ref_arg(a, "count_all").v;
  const int64_t k = mean_all.desc->shape[0], ch = mean_all.desc->shape[1];
  const double eps = p.get("eps"), mom = p.get("momentum");
  auto& mean = ref_arg(a, "mean").v;
  auto& invstd = ref_arg(a, "invstd").v;
  auto& rm = ref_arg(a, "running_mean").v;
  auto& rv = ref_arg(a, "running_var").v;
  double n = 0;
  for (int64_t j = 0; j < k; ++j) n += count[j];
  for (int64_t c = 0; c < ch; ++c) {
    double s = 0;
    for (int64_t j = 0; j < k; ++j) s += count[j] * mean_all.v[j * ch + c];
    const double mu = s / n;
    double m2 = 0;
    for (int64_t j = 0; j < k; ++j) {
      const double d = mean_all.v[j * ch + c] - mu;
      m2 += var_all[j * ch + c] * count[j] + count[j] * d * d;
    }
    mean[c] = mu;
    invstd[c] = 1.0 / std::sqrt(m2 / n + eps);
    rm[c] = (1 - mom) * rm[c] + mom * mu;
    rv[c] = (1 - mom) * rv[c] + mom * m2 / (n - 1);
  }
}

void reference(std::string_view entry, std::vector<RefArg>& a, const Params& p) {
  if (entry == "welford_parallel") return merge(a, p);
  if (entry.starts_with("welford")) {
    const RefArg& x = ref_arg(a, "x");
    const Layout L = layout_of(entry, x);
    auto& mean = ref_arg(a, "mean").v;
    auto& var = ref_arg(a, "var_biased").v;
    for (int64_t c = 0; c < L.ch; ++c) stats(L, x.v, c, mean[c], var[c]);
    return;
  }
  const RefArg& x = ref_arg(a, "x");
  const Layout L = layout_of(entry, x);
  const auto& mean = ref_arg(a, "mean").v;
  const auto& invstd = ref_arg(a, "invstd").v;
  if (entry.starts_with("forward") || entry.starts_with("relu_backward")) {
    const auto& w = ref_arg(a, "weight").v;
    const auto& b = ref_arg(a, "bias").v;
    const std::vector<double>* z = entry.ends_with("_z_c_last") ? &ref_arg(a, "z").v : nullptr;
    auto pre = [&](int64_t c, int64_t j) { return (x.v[j] - mean[c]) * invstd[c] * w[c] + b[c] + (z ? (*z)[j] : 0.0); };
    if (entry.starts_with("forward")) {
      const bool relu = c_last(entry) && p.flag("fuse_relu");
      auto& y = ref_arg(a, "y").v;
      for (int64_t c = 0; c < L.ch; ++c)
        for (int64_t i = 0; i < L.count(); ++i) {
          const int64_t j = L.at(c, i);
          const double t = pre(c, j);
          y[j] = relu && t <= 0 ? 0.0 : t;
        }
    } else {
      const auto& dy = ref_arg(a, "dy").v;
      auto& out = ref_arg(a, "dy_masked").v;
      for (int64_t c = 0; c < L.ch; ++c)
        for (int64_t i = 0; i < L.count(); ++i) {
          const int64_t j = L.at(c, i);
          out[j] = pre(c, j) <= 0 ? 0.0 : dy[j];
        }
    }
    return;
  }
  const auto& dy = ref_arg(a, "dy").v;
  if (entry.starts_with("backward_reduce")) {
    auto& sum_dy = ref_arg(a, "sum_dy").v;
    auto& sum_dy_xmu = ref_arg(a, "sum_dy_xmu").v;
    auto& gw = ref_arg(a, "grad_weight").v;
    auto& gb = ref_arg(a, "grad_bias").v;
    for (int64_t c = 0; c < L.ch; ++c) {
      double s = 0, sx = 0;
      for (int64_t i = 0; i < L.count(); ++i) {
        s += dy[L.at(c, i)];
        sx += dy[L.at(c, i)] * (x.v[L.at(c, i)] - mean[c]);
      }
      sum_dy[c] = s;
      sum_dy_xmu[c] = sx;
      gw[c] = sx * invstd[c];
      gb[c] = s;
    }
    return;
  }
  const auto& w = ref_arg(a, "weight").v;
  const auto& sum_dy = ref_arg(a, "sum_dy").v;
  const auto& sum_dy_xmu = ref_arg(a, "sum_dy_xmu").v;
  const auto& count = ref_arg(a, "count_all");
  double n = 0;
  for (double v : count.v) n += v;
  auto& dx = ref_arg(a, "dx").v;
  for (int64_t c = 0; c < L.ch; ++c) {
    const double k1 = sum_dy[c] / n, k2 = invstd[c] * invstd[c] * sum_dy_xmu[c] / n;
    for (int64_t i = 0; i < L.count(); ++i) {
      const int64_t j = L.at(c, i);
      dx[j] = (dy[j] - k1 - (x.v[j] - mean[c]) * k2) * w[c] * invstd[c];
    }
  }
}

}  // namespace

extern const OpSpec syncbn_spec{describe, prepare, reference};

}  // namespace opf::ops
