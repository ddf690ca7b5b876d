// How close a kernel's output must be to the float64 reference, and the comparison itself.
//
// Every element i of every out/inout argument must satisfy
//
//   |k_i - r_i| <= F * ( 2 u_out |r_i|  +  2 u_acc sqrt(n) kappa (|r_i| + s)  +  8 p_i  +  tiny_out )
//
//   u_out    unit roundoff of the argument's storage dtype (dtype_unit_roundoff: f32 2^-24,
//            f16 2^-11, bf16 2^-8): the final rounding to storage is <= u_out |r|; the second
//            u_out covers one more rounding on the way (e.g. an f32 intermediate for f32 data).
//   u_acc    unit roundoff of the accumulator: f32 (2^-24) for every storage dtype, f64 for f64.
//   n        CaseDesc::reduce_len, the longest reduction feeding the output; summation error of
//            n rounded terms grows like sqrt(n) (random-walk rounding; blocked/SIMD sums do better,
//            a serial sum of same-signed terms gets ~sqrt(n/3)).
//   kappa    conditioning of the drawn inputs: max over uniform-filled inputs of rms/std of the
//            fill (1 for zero-mean data, ~220 for the `offset` variant). A reduction that cancels
//            the mean (mean, variance, sum(g*dy)) loses that factor relative to its result; a
//            one-pass E[x^2]-E[x]^2 variance loses kappa^2 and fails the `offset` variant.
//   s        rms of the reference tensor: absolute scale for reduction errors in outputs that
//            cancel to ~0 (y = xhat*gamma + beta near 0), where a relative bound alone is unfair.
//   p_i      measured sensitivity: sum over the floating input arguments of |change of r_i| when
//            that argument's elements are scaled by (1 +- u_acc), the worst of 9 sign draws in
//            which any two nearby elements both share and oppose their signs
//            (DrawnCase::sensitivity). An f32 kernel sees its inputs only that precisely, once
//            per rounding of an elementwise intermediate; 8 allows a chain of a few such
//            roundings. This is what makes outputs that cancel by construction (rms_norm dx for
//            one column: terms ~1, result ~eps) fair without loosening well-conditioned ones.
//   tiny_out smallest subnormal of the storage dtype: rounding near underflow.
//   F        OpSpec::tolerance_factor(entry, arg, dtype), 1 when the op declares none.
// Integer outputs must match exactly. A NaN reference requires a NaN; an infinite one the same
// infinity; a NaN or infinity the reference does not have is always an error.
//
// Summary (ggml test-backend-ops style): nmse = sum (k-r)^2 / sum r^2 and the worst err/tol ratio,
// recorded per test so a drift shows before it fails.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "opforge/manifest.h"

namespace opf::suites {

struct Tolerance {
  double rel = 0;                          // multiplies |r_i|
  double abs = 0;                          // constant
  double sens = 0;                         // multiplies p_i
  const std::vector<double>* p = nullptr;  // per-element sensitivity (may be null)
  double bound(int64_t i, double r) const;
};

Tolerance tolerance_for(const ArgDesc& out, const CaseDesc& c, double kappa, const std::vector<double>& ref,
                        const std::vector<double>* sensitivity, double factor);

struct Comparison {
  bool ok = true;
  int64_t bad_count = 0;
  double nmse = 0;
  double worst_ratio = 0;  // max |k-r| / bound
  std::string first_bad;   // multi-line description of the first failing element
};

// kernel_bytes: the argument as the kernel left it, in its dtype.
Comparison compare(const ArgDesc& out, const std::byte* kernel_bytes, const std::vector<double>& ref,
                   const Tolerance& tol);

// "[3, 1027]"
std::string join_dims(const std::vector<int64_t>& dims);
// The multi-dimensional index of flat index i of a row-major shape, e.g. "[3, 1027]".
std::string multi_index(const Shape& shape, int64_t i);

}  // namespace opf::suites
