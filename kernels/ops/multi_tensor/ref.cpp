// multi_tensor — float64 reference and case description.
//
// Contract (apex amp_C multi_tensor_scale / _axpby / _l2norm; T = f32 | f16 | bf16 storage, f32
// math). Every entry takes parallel lists of dense tensors: element i of each list has the same
// number of elements (shapes may differ); a list length, numel or dtype mismatch fails with one
// line naming the list (and index) before anything is written. Empty lists are allowed.
// noop_flag (i32 [1]) is never read and never reset (apex: the caller zeroes it); it is set to 1
// when a checked input value is NaN or infinite, and the outputs are still computed (NaN and inf
// propagate, as apex).
//   scale  (in: in list T, out: out list, noop_flag):  out = f32(in) * f32(scale), rounded once to
//          out's dtype. out may be any of f32/f16/bf16 (one dtype for the whole list), e.g. the
//          unscale of f16 gradients into f32 master gradients; out may be in itself (same dtype).
//          Checked: in.
//   axpby  (x, y: in list T, out: out list, noop_flag):  out = f32(a)*x + f32(b)*y with both
//          products and the sum rounded to f32 (no fused multiply-add), then once to out's dtype
//          (any float dtype, as for scale). Checked (arg_to_check): -1 x and y, 0 x only, 1 y only.
//   l2norm (tensors: in list T, norm: out f32 [1], per_tensor_norms: out f32 [T or 0], noop_flag):
//          each tensor is cut into chunks of `chunk` elements (manifest tune; the last one
//          shorter). A chunk's sum of squares is accumulated in f32 in a fixed order that depends
//          only on the chunk's length (SIMD lanes, then the lanes summed); a tensor's sum is its
//          chunk sums added in f64 in order, and the global sum the tensor sums added in f64 in
//          list order. norm = f32(sqrt(global sum)); per_tensor_norms[k] = f32(sqrt(tensor k's
//          sum)) with per_tensor, else per_tensor_norms must be [0] (apex returns an empty tensor).
//          The flag is set when a chunk's f32 sum is not finite: a NaN or inf element, or squares
//          that overflow f32 (|x| >= 2^64 alone does it); that chunk's sum is then inf (or NaN),
//          and so are the norms it feeds. The reference adds exactly in f64 and makes a chunk sum
//          above the f32 range infinite, which is what the kernel's f32 chunk sum does (up to the
//          rounding of sums within an ulp of FLT_MAX, which no test draws).
// Case shape [T, max_numel]: T tensors with sizes from element_sizes() below; each element is
// [16, n/16] when 16 divides n (n >= 32), else [n].
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

#include "opforge/manifest.h"

namespace opf::ops {
namespace {

uint64_t splitmix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int64_t largest_prime_at_most(int64_t n) {
  for (int64_t p = n; p > 2; --p) {
    bool prime = p % 2 != 0;
    for (int64_t d = 3; prime && d * d <= p; d += 2) prime = p % d != 0;
    if (prime) return p;
  }
  return std::min<int64_t>(n, 2);
}

// The sizes of the T tensors of a case [T, max_numel], from the shape alone: max_numel, 1, the
// largest prime <= max_numel, then sizes hashed from the index, uniform in [1, max_numel].
std::vector<int64_t> element_sizes(int64_t count, int64_t max_numel) {
  std::vector<int64_t> n;
  for (int64_t k = 0; k < count; ++k) {
    if (k == 0) n.push_back(max_numel);
    else if (k == 1) n.push_back(1);
    else if (k == 2) n.push_back(largest_prime_at_most(max_numel));
    else n.push_back(1 + int64_t(splitmix(uint64_t(k)) % uint64_t(max_numel)));
  }
  return n;
}

Shape element_shape(int64_t n) {
  if (n >= 32 && n % 16 == 0) return {16, n / 16};
  return {n};
}

void describe(CaseDesc& c, const Shape& s, const Params& p) {
  if (s.size() != 2 || s[0] < 0 || s[1] < 1) {
    c.unsupported = "multi_tensor shapes are [list_length, max_numel]";
    return;
  }
  std::vector<Shape> shapes;
  double total = 0;
  for (int64_t n : element_sizes(s[0], s[1])) {
    shapes.push_back(element_shape(n));
    total += double(n);
  }
  const double e = double(dtype_size(c.dtype));
  const Fill data{Fill::uniform, -1.0, 1.0};
  c.set("noop_flag", {1}, {Fill::index, 0, 1});  // integers in [0, 1): 0 (the flag is not counted in bytes)
  c.reduce_len = 1;
  if (c.entry == "scale") {
    c.set_list("in", shapes, data);
    c.set_list("out", shapes);
    c.bytes = total * 2 * e;
    c.flops = total;
  } else if (c.entry == "axpby") {
    c.set_list("x", shapes, data);
    c.set_list("y", shapes, {Fill::uniform, -2.0, 0.5});
    c.set_list("out", shapes);
    c.bytes = total * 3 * e;
    c.flops = 3 * total;
  } else {
    c.set_list("tensors", shapes, data);
    c.set("norm", {1});
    c.set("per_tensor_norms", {p.flag("per_tensor") ? s[0] : 0});
    c.bytes = total * e + 4.0 * (1 + (p.flag("per_tensor") ? double(s[0]) : 0.0));
    c.flops = 2 * total;
    c.reduce_len = std::max<int64_t>(1, int64_t(total));
  }
}

double f32(double v) { return double(float(v)); }

int64_t chunk_elements() {
  const OpInfo* op = find_op("multi_tensor");
  if (op)
    for (const auto& [name, v] : op->tune)
      if (name == "chunk") return int64_t(v);
  return 65536;
}

void reference(std::string_view entry, std::vector<RefArg>& a, const Params& p) {
  auto& flag = ref_arg(a, "noop_flag").v;
  bool nonfinite = false;
  if (entry == "scale") {
    const auto in = ref_list(a, "in"), out = ref_list(a, "out");
    const double s = f32(p.get("scale"));
    for (size_t k = 0; k < in.size(); ++k)
      for (size_t i = 0; i < in[k].v.size(); ++i) {
        nonfinite |= !std::isfinite(in[k].v[i]);
        out[k].v[i] = in[k].v[i] * s;
      }
  } else if (entry == "axpby") {
    const auto x = ref_list(a, "x"), y = ref_list(a, "y"), out = ref_list(a, "out");
    const double fa = f32(p.get("a")), fb = f32(p.get("b"));
    const int64_t check = p.get_int("arg_to_check") - 1;  // choice index 0, 1, 2 -> apex's -1, 0, 1
    for (size_t k = 0; k < x.size(); ++k)
      for (size_t i = 0; i < x[k].v.size(); ++i) {
        const double xi = x[k].v[i], yi = y[k].v[i];
        if (check != 1) nonfinite |= !std::isfinite(xi);
        if (check != 0) nonfinite |= !std::isfinite(yi);
        out[k].v[i] = fa * xi + fb * yi;
      }
  } else {
    const auto t = ref_list(a, "tensors");
    const int64_t chunk = chunk_elements();
    double global = 0;
    std::vector<double> per(t.size(), 0.0);
    for (size_t k = 0; k < t.size(); ++k) {
      const auto& v = t[k].v;
      for (size_t b = 0; b < v.size(); b += size_t(chunk)) {
        double s = 0;
        for (size_t i = b; i < std::min(v.size(), b + size_t(chunk)); ++i) s += v[i] * v[i];
        if (s > double(FLT_MAX)) s = INFINITY;  // the kernel's f32 chunk sum overflows
        nonfinite |= !std::isfinite(s);
        per[k] += s;
      }
      global += per[k];
    }
    ref_arg(a, "norm").v[0] = std::sqrt(global);
    auto& pt = ref_arg(a, "per_tensor_norms").v;
    for (size_t k = 0; k < pt.size(); ++k) pt[k] = std::sqrt(per[k]);
  }
  if (nonfinite) flag[0] = 1;
}

}  // namespace

extern const OpSpec multi_tensor_spec{describe, nullptr, reference};

}  // namespace opf::ops
