// The correctness sweep of one op case — every fill variant (case_data.h) with the manifest's
// default params, and the random fill with every other param set (param_sweep.h), each output
// checked element by element against the float64 reference (tolerance.h) — on one executor: a
// device and a module. The kernel suite runs it on the loader's modules (every backend); the GPU
// emulation suite on kernel.cu compiled for the host. Same sweep, only the executor differs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "case_data.h"
#include "opforge/loader.h"
#include "opforge/manifest.h"

namespace opf::suites {

struct SweepCase {
  const OpInfo* op;
  std::string backend, dtype, entry;
  Shape shape;
  std::string name;  // the test's name, e.g. <op>/<backend>/<dtype>/<entry>/<shape>
};

struct Executor {
  Device* device;
  const opf_module_info* module;
};

// Runs inside a GoogleTest test: failures are test failures, a case the op or module does not
// support skips with its reason. `executor` is called once, when the first variant is ready to
// run (a case every variant of which is skipped loads nothing). `repro` ends every failure message.
void run_sweep(const SweepCase& c, uint64_t base_seed, const std::function<Executor()>& executor,
               const std::string& repro);

// "" unless a reference output is beyond what its storage dtype can hold: the variant is outside
// the op's domain for that dtype (e.g. a large-magnitude f16 reduction), not a kernel error.
std::string out_of_range(const DrawnCase& d);

}  // namespace opf::suites
