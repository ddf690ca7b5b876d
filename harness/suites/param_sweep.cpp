#include "param_sweep.h"

#include <cmath>

#include "seed.h"

namespace opf::suites {
namespace {

// A value of p other than its default, drawn from its sample range.
double draw_other(const ParamInfo& p, Rng& rng) {
  switch (p.type) {
    case ParamType::boolean: return p.def != 0 ? 0 : 1;
    case ParamType::enumeration:
      return double((int64_t(p.def) + 1 + int64_t(rng.next() % (p.choices.size() - 1))) % int64_t(p.choices.size()));
    case ParamType::i64:
    case ParamType::f64: break;
  }
  const double lo = p.sample_lo, hi = p.sample_hi;
  for (int tries = 0; tries < 64; ++tries) {
    double v;
    if (p.type == ParamType::i64) {
      const int64_t span = int64_t(hi) - int64_t(lo) + 1;
      v = double(int64_t(lo) + int64_t(rng.next() % uint64_t(span > 0 ? span : 1)));
    } else if (lo > 0 && hi / lo > 100) {
      v = std::exp(std::log(lo) + (std::log(hi) - std::log(lo)) * rng.uniform());  // scale-free ranges
    } else {
      v = lo + (hi - lo) * rng.uniform();
    }
    // f64 params as f32-exact values: kernels in f32 take them as floats, and the rounding of a
    // param is one coherent error over every element (e.g. softmax's scale times scores of 40 gives
    // ~20 ulp) that the per-element tolerance model does not describe
    if (p.type == ParamType::f64) v = double(float(v));
    if (v != p.def && p.check(v).empty()) return v;
  }
  return p.def;  // a sample range holding only the default: nothing else to try
}

}  // namespace

std::string describe_params(const OpInfo& op, const Params& p) {
  std::string s;
  for (const ParamInfo& i : op.params) (s += s.empty() ? "" : " ") += i.name + "=" + i.format(p.get(i.name));
  return s;
}

std::vector<ParamSet> param_sets(const OpInfo& op, uint64_t seed) {
  std::vector<ParamSet> sets;
  const Params defaults = op.default_params();
  sets.push_back({"defaults", defaults});
  if (op.params.empty()) return sets;
  Rng rng(seed);
  Params all = defaults;
  bool has_switches = false, has_numbers = false;
  for (const ParamInfo& p : op.params) {
    all.set(p.name, draw_other(p, rng));
    const bool sw = p.type == ParamType::boolean || p.type == ParamType::enumeration;
    has_switches |= sw;
    has_numbers |= !sw;
  }
  sets.push_back({describe_params(op, all), all});
  if (has_switches && has_numbers) {  // the drawn numbers under the default switches too (AdamW with decay)
    Params numbers = all;
    for (const ParamInfo& p : op.params)
      if (p.type == ParamType::boolean || p.type == ParamType::enumeration) numbers.set(p.name, p.def);
    sets.push_back({describe_params(op, numbers), numbers});
  }
  for (const ParamInfo& p : op.params) {
    for (double v : p.sweep) {  // values with their own code path (e.g. exact fast paths), each alone
      if (v == p.def) continue;
      Params one = defaults;
      one.set(p.name, v);
      sets.push_back({p.name + "=" + p.format(v), one});
    }
    if (p.type != ParamType::boolean && p.type != ParamType::enumeration) continue;
    const size_t n = p.type == ParamType::boolean ? 2 : p.choices.size();
    for (size_t v = 0; v < n; ++v) {
      if (double(v) == p.def) continue;
      Params one = defaults;
      one.set(p.name, double(v));
      if (op.params.size() == 1 && n == 2) continue;  // the same as the all-changed set
      sets.push_back({p.name + "=" + p.format(double(v)), one});
    }
  }
  return sets;
}

}  // namespace opf::suites
