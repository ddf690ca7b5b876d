#include "sweep.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>

#include "case_data.h"
#include "param_sweep.h"
#include "seed.h"
#include "staged_case.h"
#include "tolerance.h"

namespace opf::suites {
namespace {

void check(const SweepCase& c, const DrawnCase& d, const StagedCase& staged, const std::string& vname, uint64_t seed,
           const std::string& repro) {
  // per argument name: a list's elements share it, and its worst element is what counts
  std::map<std::string, std::pair<double, double>> worst;  // name -> (worst ratio, its nmse)
  for (size_t i = 0; i < d.host.size(); ++i) {
    const ArgDesc& a = *d.host[i].desc;
    const std::vector<std::byte> got = staged.fetch(i);
    if (a.role == Role::in) {
      EXPECT_EQ(0, std::memcmp(got.data(), d.host[i].bytes.data(), got.size()))
          << "kernel modified its input '" << a.name << "'\n"
          << repro;
      continue;
    }
    const double f = c.op->spec->tolerance_factor ? c.op->spec->tolerance_factor(c.entry, a, a.dtype) : 1.0;
    const Tolerance tol = tolerance_for(a, d.desc, d.kappa, d.ref[i].v, &d.sensitivity[i], f);
    const Comparison cmp = compare(a, got.data(), d.ref[i].v, tol);
    auto [it, first] = worst.try_emplace(a.name, cmp.worst_ratio, cmp.nmse);
    if (!first && !(cmp.worst_ratio <= it->second.first)) it->second = {cmp.worst_ratio, cmp.nmse};
    EXPECT_TRUE(cmp.ok) << cmp.first_bad << "\n  kappa " << d.kappa << ", reduce_len " << d.desc.reduce_len << ", seed "
                        << seed << "\n"
                        << repro;
  }
  for (const auto& [name, w] : worst) {
    ::testing::Test::RecordProperty(vname + "." + name + ".worst_err_ratio", std::to_string(w.first));
    ::testing::Test::RecordProperty(vname + "." + name + ".nmse", std::to_string(w.second));
  }
  for (const std::string& name : staged.overrun_args())
    ADD_FAILURE() << "kernel wrote past the end of argument '" << name << "'\n" << repro;
}

}  // namespace

std::string out_of_range(const DrawnCase& d) {
  for (const RefArg& r : d.ref) {
    if (r.desc->role == Role::in || !dtype_is_float(r.desc->dtype)) continue;
    const double mx = dtype_max_finite(r.desc->dtype);
    for (double v : r.v)
      if (std::isfinite(v) && std::fabs(v) > mx)
        return "reference '" + r.desc->name + "' reaches " + std::to_string(v) + ", beyond " +
               std::string(dtype_name(r.desc->dtype));
  }
  return {};
}

void run_sweep(const SweepCase& c, uint64_t base_seed, const std::function<Executor()>& executor,
               const std::string& repro) {
  const DType dtype = *dtype_from_name(c.dtype);
  int ran = 0;
  std::string unsupported;
  std::optional<Executor> x;
  const std::vector<ParamSet> sets = param_sets(*c.op, test_seed(base_seed, c.name + "/params"));
  for (const ParamSet& ps : sets) {
    for (Variant v : all_variants()) {
      if (&ps != &sets.front() && v != Variant::random) continue;  // other params: the random fill
      const std::string vname(variant_name(v));
      SCOPED_TRACE("variant " + vname + ", params " + describe_params(*c.op, ps.values));
      const uint64_t seed = test_seed(base_seed, c.name + "/" + vname);
      DrawnCase d = draw_case(*c.op, c.entry, dtype, c.shape, v, seed, true, &ps.values);
      if (!d.desc.unsupported.empty()) GTEST_SKIP() << "case not supported by the op: " << d.desc.unsupported;
      if (auto why = out_of_range(d); !why.empty()) {
        std::printf("  [variant %s, params %s not run: %s]\n", vname.c_str(), ps.label.c_str(), why.c_str());
        continue;
      }
      if (!x) x = executor();
      StagedCase staged(*x->device, *c.op, d);
      if (std::string why = staged.supports(x->module); !why.empty()) {
        std::printf("  [params %s unsupported: %s]\n", ps.label.c_str(), why.c_str());
        unsupported = why;
        continue;
      }
      staged.run(x->module);  // throws with the module's one-line reason
      staged.synchronize();
      check(c, d, staged, vname, seed, repro);
      ++ran;
    }
  }
  ::testing::Test::RecordProperty("base_seed", std::to_string(base_seed));
  ::testing::Test::RecordProperty("param_sets", std::to_string(sets.size()));
  if (ran == 0 && !unsupported.empty()) GTEST_SKIP() << "unsupported: " << unsupported;
  if (ran == 0) GTEST_SKIP() << "every fill variant exceeds the dtype's range for this case";
}

}  // namespace opf::suites
