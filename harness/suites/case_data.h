// One op case as the suites see it: the op's CaseDesc, every argument stored in its dtype on the
// host, and (for the correctness suite) the same values in float64 for the reference.
//
// Contract: drawn inputs are rounded to their storage dtype first and the reference reads the
// values *as stored*, so input rounding is never counted as kernel error. Derived inputs
// (OpSpec::prepare) are stored in their dtype and read back the same way. Out arguments are
// poisoned with a NaN pattern so an element a kernel never writes cannot pass.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "opforge/manifest.h"

namespace opf::suites {

// How the uniform fills of the op's CaseDesc are transformed. Never produces stored zeros
// (except in masks, where 0 means "keep").
enum class Variant {
  random,  // the op's own ranges
  offset,  // shifted by 64x the range width: large mean against a small spread (cancellation)
  small,   // scaled by 2^-10: eps dominates variance-like reductions
  large,   // scaled up (f16: 2^6, f32/bf16: 2^20): far from 1, within the dtype's range
  nan,     // random, plus a NaN in every 4th row (last dim) of the first drawn float input: NaN
           // must reach exactly the outputs the float64 reference makes NaN, and no others
};
std::string_view variant_name(Variant v);
const std::vector<Variant>& all_variants();

// load_element / store_element: opforge/dtype.h.
// The largest finite value of a floating dtype (0 for integer dtypes).
double dtype_max_finite(DType t);
// The smallest positive subnormal of a floating dtype (0 for integer dtypes).
double dtype_min_subnormal(DType t);
bool dtype_is_float(DType t);

struct HostArg {
  const ArgDesc* desc = nullptr;
  std::vector<std::byte> bytes;  // numel * dtype_size, row-major
};

struct DrawnCase {
  // host[i].desc and ref[i].desc point into desc.args: movable, not copyable
  DrawnCase() = default;
  DrawnCase(DrawnCase&&) = default;
  DrawnCase& operator=(DrawnCase&&) = default;
  DrawnCase(const DrawnCase&) = delete;
  DrawnCase& operator=(const DrawnCase&) = delete;

  CaseDesc desc;              // unsupported non-empty: nothing else is filled
  Params params;              // the param values this case was drawn and referenced with
  std::vector<HostArg> host;  // every argument in ABI order; outs poisoned
  std::vector<RefArg> ref;    // float64 values (only with_reference); outs filled by reference()
  double kappa = 1;           // conditioning proxy of the drawn inputs (see tolerance.h)
  // Per out/inout argument (empty for inputs): max |change| of each reference output when every
  // floating input element is scaled by (1 +- u_acc) with random signs (see tolerance.h).
  std::vector<std::vector<double>> sensitivity;
};

// Draws a case. with_reference: also computes every output in float64 (the correctness suite);
// without it only in/inout arguments get float64 copies, and only as long as prepare() needs them
// (benchmarks on large shapes). params: null = the manifest defaults.
DrawnCase draw_case(const OpInfo& op, std::string_view entry, DType dtype, const Shape& shape, Variant variant,
                    uint64_t seed, bool with_reference, const Params* params = nullptr);

// Bytes of every argument of the case, as drawn on the host.
size_t host_bytes(const DrawnCase& c);

// Fills bytes with a quiet-NaN pattern for floating dtypes and 0xA5 for integer ones.
void poison(DType t, std::byte* base, int64_t n);

}  // namespace opf::suites
