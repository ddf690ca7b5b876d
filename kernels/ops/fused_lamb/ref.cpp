// fused_lamb — float64 reference and case description.
//
// Contract (apex multi_tensor_lamb / FusedLAMB; T = f32 | f16 | bf16 storage, f32 math):
//   step (grads: inout list T, params: inout list T, exp_avg: inout list f32, exp_avg_sq: inout
//         list f32, noop_flag: inout i32 [1])
//   Lists: the four lists have the same length L (0 allowed: nothing to do); element i of each has
//     the same number of elements (shapes may differ; tensors are dense). A length, numel or dtype
//     mismatch fails with one line naming the list (and index) before anything is written.
//   noop_flag: as apex's LAMB (whose kernels deliberately ignore the flag so that inf/NaN
//     propagate), the step always runs whatever the flag holds on entry; noop_flag[0] is set to 1
//     if some gradient element is NaN or infinite (the l2norm of the gradients sees a non-finite
//     partial), and never reset to 0. (An f32 sum of squares overflowing on finite gradients of
//     magnitude >= ~2^63 sets it too, as apex's l2norm; the reference does not model that.)
//   Factors, computed once per call on the host (what the kernel uses, and so what this reference
//   uses, as doubles holding f32 values; 1 - beta computed in double, then rounded):
//     b1 = f32(beta1), b3 = f32(1 - beta1) with grad_averaging else 1, b2 = f32(beta2),
//     omb2 = f32(1 - beta2), lr, eps, wd, mgn = f32(lr), f32(eps), f32(weight_decay),
//     f32(max_grad_norm); rbc1 = f32(1 / (1 - beta1^step)), rbc2 = f32(1 / (1 - beta2^step))
//     (pow in double), both 1 without bias_correction.
//   Stage 0: G = sqrt(sum of g^2 over every element of every tensor) (the kernel: f32 chunk sums
//     combined in double, rounded to f32). rclip = mgn / G if G > mgn else 1 (a NaN G compares
//     false: 1; an infinite G gives 0, so finite gradients vanish and infinite ones become NaN).
//   Stage 1, per element, g and p widened to f32:
//     g' = g * rclip;  L2 (adam_w_mode false): g' = g' + wd*p
//     m = b1*m + b3*g';  v = b2*v + omb2*g'*g'
//     u = (m*rbc1) / (sqrt(v*rbc2) + eps)            (eps outside the sqrt)
//     decoupled (adam_w_mode true): u = u + wd*p
//     u is rounded to T and overwrites the gradient (grads holds the update afterwards).
//   Stage 2, per tensor: pn = ||p|| (p before the update), un = ||u|| (u as stored in T).
//     ratio = lr * (pn / un) when (wd != 0 or use_nvlamb) and pn != 0 and un != 0, else lr
//     (no clamp; a NaN norm compares != 0, so it makes the ratio NaN).
//     p = p - ratio*u, rounded once to T; m, v stored in f32.
//   Case shape [L, max_numel]: L tensors with sizes from element_sizes() below; each element is
//   [16, n/16] when 16 divides n (n >= 32), else [n].
#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

#include "opforge/dtype.h"
#include "opforge/manifest.h"

namespace opf::ops {
namespace {

uint64_t mix(uint64_t z) {  // splitmix64 finaliser
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

bool is_prime(int64_t n) {
  if (n < 2) return false;
  for (int64_t d = 2; d * d <= n; ++d)
    if (n % d == 0) return false;
  return true;
}

// The sizes of the L tensors of a case [L, max_numel], from the shape alone: the first is
// max_numel, then 1, then the largest prime <= max_numel, then sizes hashed from the index.
std::vector<int64_t> element_sizes(int64_t count, int64_t max_numel) {
  std::vector<int64_t> n(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k) {
    if (k == 0) {
      n[size_t(k)] = max_numel;
    } else if (k == 1) {
      n[size_t(k)] = 1;
    } else if (k == 2) {
      int64_t p = max_numel;
      while (p > 1 && !is_prime(p)) --p;
      n[size_t(k)] = p;
    } else {
      n[size_t(k)] = 1 + int64_t(mix(uint64_t(k)) % uint64_t(max_numel));
    }
  }
  return n;
}

Shape element_shape(int64_t n) {
  if (n >= 32 && n % 16 == 0) return {16, n / 16};
  return {n};
}

bool uses_trust_ratio(const Params& p) { return p.get("weight_decay") != 0 || p.flag("use_nvlamb"); }

void describe(CaseDesc& c, const Shape& s, const Params& params) {
  if (s.size() != 2 || s[0] < 0 || s[1] < 1) {
    c.unsupported = "fused_lamb shapes are [list_length, max_numel]";
    return;
  }
  std::vector<Shape> shapes;
  double total = 0;
  for (int64_t n : element_sizes(s[0], s[1])) {
    shapes.push_back(element_shape(n));
    total += double(n);
  }
  c.set_list("grads", shapes, {Fill::uniform, -1.0, 1.0});
  c.set_list("params", shapes, {Fill::uniform, -1.0, 1.0});
  c.set_list("exp_avg", shapes, {Fill::uniform, -0.5, 0.5});
  c.set_list("exp_avg_sq", shapes, {Fill::uniform, 0.01, 1.0});  // >= 0, as a running mean of g^2
  c.set("noop_flag", {1}, {Fill::index, 0, 1});                  // integers in [0, 1): 0
  const double e = double(dtype_size(c.dtype));
  // The grad norm must be known before any moment, and the update norms before any param, so at
  // least: read g (norm); read g, p, m, v and write u, m, v; read u, p and write p. Without a
  // trust ratio the last two fuse: read g, p, m, v, write u, p, m, v.
  c.bytes = uses_trust_ratio(params) ? total * (7 * e + 16) : total * (5 * e + 16);
  // per element: g^2 2, clip 1, m 3, v 4, u 5 (2 mul, sqrt, add, div), decay 2, norms 4, p 2
  c.flops = 23 * total;
  c.reduce_len = s[1];  // per-tensor norms; the kernel sums chunks in f32 and those in f64
}

double f32(double v) { return double(float(v)); }

double round_to(DType t, double v) {
  unsigned char b[8];
  store_element(t, b, 0, v);
  return load_element(t, b, 0);
}

void reference(std::string_view, std::vector<RefArg>& a, const Params& params) {
  auto& flag = ref_arg(a, "noop_flag").v;
  const auto g = ref_list(a, "grads"), p = ref_list(a, "params"), m = ref_list(a, "exp_avg"),
             v = ref_list(a, "exp_avg_sq");
  if (g.empty()) return;
  const DType dt = g[0].desc->dtype;
  const double beta1 = params.get("beta1"), beta2 = params.get("beta2"), t = double(params.get_int("step"));
  const bool bc = params.flag("bias_correction"), adamw = params.flag("adam_w_mode");
  const double b1 = f32(beta1), b3 = params.flag("grad_averaging") ? f32(1.0 - beta1) : 1.0, b2 = f32(beta2),
               omb2 = f32(1.0 - beta2), lr = f32(params.get("lr")), eps = f32(params.get("eps")),
               wd = f32(params.get("weight_decay")), mgn = f32(params.get("max_grad_norm"));
  const double rbc1 = bc ? f32(1.0 / (1.0 - std::pow(beta1, t))) : 1.0;
  const double rbc2 = bc ? f32(1.0 / (1.0 - std::pow(beta2, t))) : 1.0;

  double g2 = 0;
  bool nonfinite = false;
  for (auto& gk : g)
    for (double x : gk.v) {
      g2 += x * x;
      nonfinite |= !std::isfinite(x);
    }
  const double G = std::sqrt(g2);
  const double rclip = G > mgn ? mgn / G : 1.0;

  const bool trust = uses_trust_ratio(params);
  for (size_t k = 0; k < g.size(); ++k) {
    double p2 = 0, u2 = 0;
    for (size_t i = 0; i < g[k].v.size(); ++i) {
      const double pi = p[k].v[i];
      double gi = g[k].v[i] * rclip;
      if (!adamw) gi += wd * pi;
      const double mi = m[k].v[i] = b1 * m[k].v[i] + b3 * gi;
      const double vi = v[k].v[i] = b2 * v[k].v[i] + omb2 * gi * gi;
      double u = (mi * rbc1) / (std::sqrt(vi * rbc2) + eps);
      if (adamw) u += wd * pi;
      u = g[k].v[i] = round_to(dt, u);  // stage 2 reads the update back from the gradient buffer
      p2 += pi * pi;
      u2 += u * u;
    }
    const double pn = std::sqrt(p2), un = std::sqrt(u2);
    const double ratio = trust && pn != 0 && un != 0 ? lr * (pn / un) : lr;
    for (size_t i = 0; i < g[k].v.size(); ++i) p[k].v[i] -= ratio * g[k].v[i];
  }
  if (nonfinite) flag[0] = 1;
}

}  // namespace

extern const OpSpec fused_lamb_spec{describe, nullptr, reference};

}  // namespace opf::ops
