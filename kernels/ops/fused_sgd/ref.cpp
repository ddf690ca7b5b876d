// fused_sgd — float64 reference and case description.
//
// Contract (apex multi_tensor_sgd / FusedSGD; T = f32 | f16 | bf16 storage, f32 math):
//   step (grads: in list T, params: inout list T, momentum_buffer: inout list f32,
//         noop_flag: inout i32 [1])
//   step_with_copy (grads: in list T, params: inout list f32, momentum_buffer: inout list f32,
//         model_copy: out list T, noop_flag: inout i32 [1])
//     apex's 4-list multi_tensor_sgd (fp16 model copy): f32 master params, the same update, and
//     model_copy = the new p rounded to T (with the flag set nothing is written, model_copy
//     included).
//   Lists: the three (four) lists have the same length L (0 allowed: nothing to do); element i of each
//     has the same number of elements (shapes may differ; tensors are dense). A length, numel or
//     dtype mismatch fails with one line naming the list (and index) before anything is written.
//   noop_flag: if noop_flag[0] != 0 on entry the step is skipped: nothing is written, bitwise.
//     Otherwise every element is updated. As apex's SGD kernel, this op only reads the flag: a
//     non-finite gradient propagates into its element's momentum and param and the flag is left
//     as it was (the grad scaler's unscale pass is what sets it, before this step).
//   Factors, computed once per call on the host (as doubles holding f32 values):
//     lr, mu, wd, scale = f32(lr), f32(momentum), f32(weight_decay), f32(scale)
//     omd = f32(1 - dampening)   (1 - dampening computed in double, then rounded)
//   Per element, with g, p widened to f32:
//     g = g*scale
//     wd != 0 and not wd_after_momentum:  g = g + wd*p
//     mu != 0:  b = first_run ? g : mu*b + omd*g        (b: the momentum buffer, stored in f32)
//               g = nesterov ? g + mu*b : b
//     mu == 0:  the momentum buffer is neither read nor written (nesterov has no effect)
//     wd != 0 and wd_after_momentum:  g = g + wd*p
//     p = p - lr*g, rounded once to T.
//   The kernel rounds each f32 operation (fused multiply-adds where cpu.cpp says so); the
//   reference computes the same expression in double from the same factors.
//   Case shape [L, max_numel]: L tensors with sizes from element_sizes() below; each element is
//   [16, n/16] when 16 divides n (n >= 32), else [n].
#include <cmath>
#include <cstdint>
#include <span>
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

// Sizes of the L tensors of a case [L, max_numel], from the shape alone: max_numel, 1, the
// largest prime <= max_numel, then sizes hashed from the index in [1, max_numel].
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

double f32(double v) { return double(float(v)); }

void describe(CaseDesc& c, const Shape& s, const Params& params) {
  if (s.size() != 2 || s[0] < 0 || s[1] < 1) {
    c.unsupported = "fused_sgd shapes are [list_length, max_numel]";
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
  c.set_list("momentum_buffer", shapes, {Fill::uniform, -0.5, 0.5});
  const bool copy = c.entry == "step_with_copy";
  if (copy) c.set_list("model_copy", shapes);
  c.set("noop_flag", {1}, {Fill::index, 0, 1});  // integers in [0, 1): 0, the step runs
  const double e = double(dtype_size(c.dtype));
  const bool mom = f32(params.get("momentum")) != 0, first = params.flag("first_run");
  const bool wd = f32(params.get("weight_decay")) != 0, nesterov = params.flag("nesterov");
  // read g, p; write p; the buffer is read and written, only written on the first run, or untouched
  // step_with_copy: p is f32 (read, written) and the copy in T written
  c.bytes = total * ((copy ? e + 8 + e : 3 * e) + (mom ? (first ? 4 : 8) : 0));
  c.flops = total * (1 + (wd ? 2 : 0) + (mom ? (first ? 0 : 3) + (nesterov ? 2 : 0) : 0) + 2);
  c.reduce_len = 1;
}

void reference(std::string_view entry, std::vector<RefArg>& a, const Params& params) {
  auto& flag = ref_arg(a, "noop_flag").v;
  if (flag[0] != 0) return;  // skipped: every inout keeps its input value
  const auto g = ref_list(a, "grads"), p = ref_list(a, "params"), b = ref_list(a, "momentum_buffer");
  const auto copy = entry == "step_with_copy" ? ref_list(a, "model_copy") : std::span<RefArg>();
  const double lr = f32(params.get("lr")), mu = f32(params.get("momentum")), wd = f32(params.get("weight_decay"));
  const double scale = f32(params.get("scale")), omd = f32(1.0 - params.get("dampening"));
  const bool nesterov = params.flag("nesterov"), after = params.flag("wd_after_momentum"),
             first = params.flag("first_run");
  for (size_t k = 0; k < g.size(); ++k)
    for (size_t i = 0; i < g[k].v.size(); ++i) {
      double gi = g[k].v[i] * scale;
      const double pi = p[k].v[i];
      if (wd != 0 && !after) gi += wd * pi;
      if (mu != 0) {
        double& bi = b[k].v[i];
        bi = first ? gi : mu * bi + omd * gi;
        gi = nesterov ? gi + mu * bi : bi;
      }
      if (wd != 0 && after) gi += wd * pi;
      p[k].v[i] = pi - lr * gi;
      if (!copy.empty()) copy[k].v[i] = p[k].v[i];
    }
}

}  // namespace

extern const OpSpec fused_sgd_spec{describe, nullptr, reference};

}  // namespace opf::ops
