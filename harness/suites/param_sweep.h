// The param values the correctness sweep runs every case with: the manifest defaults, one set
// with every param away from its default (numerics drawn from their `sample` range with the
// test's seed, bools flipped, enums at another choice), the same drawn numerics with the bools and
// enums at their defaults, one set per bool/enum value with only that param changed, and one set per
// value of a numeric param's manifest `sweep` list with only that param changed. Labels print the values, so a
// failure's replay line shows them. Drawn f64 values are representable in f32 (f32 kernels take them as floats: see
// param_sweep.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "opforge/manifest.h"

namespace opf::suites {

struct ParamSet {
  std::string label;  // "defaults" or "eps=0.0031 adam_w_mode=false"
  Params values;
};

std::vector<ParamSet> param_sets(const OpInfo& op, uint64_t seed);
std::string describe_params(const OpInfo& op, const Params& p);  // "eps=1e-05 step=3"

}  // namespace opf::suites
