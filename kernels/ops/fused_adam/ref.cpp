// fused_adam — float64 reference and case description.
//
// Contract (apex multi_tensor_adam / FusedAdam; T = f32 | f16 | bf16 storage, f32 math):
//   step (grads: in list T, params: inout list T, exp_avg: inout list f32, exp_avg_sq: inout list
//         f32, noop_flag: inout i32 [1])
//   Lists: the four lists have the same length L (0 allowed: nothing to do); element i of each has
//     the same number of elements (shapes may differ; tensors are dense). A length, numel or dtype
//     mismatch fails with one line naming the list (and index) before anything is written.
//   noop_flag: if noop_flag[0] != 0 on entry the step is skipped: nothing is written, bitwise.
//     Otherwise every element is updated (a non-finite gradient propagates into that element's
//     m, v and p, as apex) and noop_flag[0] is set to 1 if any gradient element (as given, before
//     L2 decay) is non-finite; the kernel never resets it to 0 (a grad scaler checks it and
//     discards the step).
//   Factors, computed once per call on the host (what the kernel uses, and so what this reference
//   uses, as doubles holding f32 values):
//     b1 = f32(beta1), omb1 = f32(1 - beta1), b2 = f32(beta2), omb2 = f32(1 - beta2)
//       (1 - beta computed in double, then rounded)
//     lr, eps, wd = f32(lr), f32(eps), f32(weight_decay)
//     rbc1 = f32(1 / (1 - beta1^step)), rbc2 = f32(1 / (1 - beta2^step)) with beta^step = pow() in
//       double; both 1 when bias_correction is false. (beta^step underflows to 0 for large steps:
//       the corrections are then exactly 1.)
//   Per element, with g, p widened to f32:
//     L2 (adam_w_mode false):  g = g + wd*p
//     m = b1*m + omb1*g;  v = b2*v + omb2*g*g
//     u = (m*rbc1) / (sqrt(v*rbc2) + eps)               (eps outside the sqrt, as apex)
//     AdamW (adam_w_mode true): u = u + wd*p            (p: the value before this update)
//     p = p - lr*u, rounded once to T; m, v stored in f32.
//   The kernel rounds each f32 operation (fused multiply-adds where it says so in cpu.cpp); the
//   reference computes the same expression in double from the same factors, so the difference is
//   only those f32 roundings.
//   Case shape [L, max_numel]: L tensors with sizes from element_sizes() below; each element is
//   [16, n/16] when 16 divides n (n >= 32), else [n].
#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

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
// max_numel, then 1, then the largest prime <= max_numel, then sizes hashed from the index,
// uniform in [1, max_numel] (odd, even and prime ones among them).
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

void describe(CaseDesc& c, const Shape& s, const Params&) {
  if (s.size() != 2 || s[0] < 0 || s[1] < 1) {
    c.unsupported = "fused_adam shapes are [list_length, max_numel]";
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
  c.set("noop_flag", {1}, {Fill::index, 0, 1});                  // integers in [0, 1): 0, step runs
  const double e = double(dtype_size(c.dtype));
  // read g, p, m, v; write p, m, v (the flag: 4 bytes per call, not counted)
  c.bytes = total * (3 * e + 4 * 4);
  // per element: m 3, v 4, m_hat/v_hat 2, sqrt 1, +eps 1, divide 1, decay 2, p -= lr*u 2
  c.flops = 16 * total;
  c.reduce_len = 1;
}

struct Factors {
  double b1, omb1, b2, omb2, lr, eps, wd, rbc1, rbc2;
  bool adamw;
};

double f32(double v) { return double(float(v)); }

Factors factors(const Params& p) {
  const double beta1 = p.get("beta1"), beta2 = p.get("beta2");
  const double t = double(p.get_int("step"));
  Factors f{};
  f.b1 = f32(beta1);
  f.omb1 = f32(1.0 - beta1);
  f.b2 = f32(beta2);
  f.omb2 = f32(1.0 - beta2);
  f.lr = f32(p.get("lr"));
  f.eps = f32(p.get("eps"));
  f.wd = f32(p.get("weight_decay"));
  f.rbc1 = p.flag("bias_correction") ? f32(1.0 / (1.0 - std::pow(beta1, t))) : 1.0;
  f.rbc2 = p.flag("bias_correction") ? f32(1.0 / (1.0 - std::pow(beta2, t))) : 1.0;
  f.adamw = p.flag("adam_w_mode");
  return f;
}

void reference(std::string_view, std::vector<RefArg>& a, const Params& params) {
  auto& flag = ref_arg(a, "noop_flag").v;
  if (flag[0] != 0) return;  // skipped: every inout keeps its input value
  const auto g = ref_list(a, "grads"), p = ref_list(a, "params"), m = ref_list(a, "exp_avg"),
             v = ref_list(a, "exp_avg_sq");
  const Factors f = factors(params);
  bool nonfinite = false;
  for (size_t k = 0; k < g.size(); ++k)
    for (size_t i = 0; i < g[k].v.size(); ++i) {
      double gi = g[k].v[i];
      const double pi = p[k].v[i];
      nonfinite |= !std::isfinite(gi);
      if (!f.adamw) gi += f.wd * pi;
      const double mi = m[k].v[i] = f.b1 * m[k].v[i] + f.omb1 * gi;
      const double vi = v[k].v[i] = f.b2 * v[k].v[i] + f.omb2 * gi * gi;
      double u = (mi * f.rbc1) / (std::sqrt(vi * f.rbc2) + f.eps);
      if (f.adamw) u += f.wd * pi;
      p[k].v[i] = pi - f.lr * u;
    }
  if (nonfinite) flag[0] = 1;
}

}  // namespace

extern const OpSpec fused_adam_spec{describe, nullptr, reference};

}  // namespace opf::ops
