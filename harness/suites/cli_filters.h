// Validation and filter composition shared by `opforge test` and `opforge bench`: --op, --backend
// and --dtype are checked against the registry and turned into the suites' name patterns
// (`<op>/<backend>/<dtype>/<entry>/<shape>`).
#pragma once

#include <string>

namespace opf::suites {

struct CaseFilter {
  std::string op, backend, dtype;  // empty = any

  // Throws opf::Error ("unknown op 'x' (this build has: a, b)") for names this build lacks.
  void validate() const;
  // GoogleTest filter over the correctness suite's names (peer adapter checks included unless a
  // backend is selected: peers have none).
  std::string gtest_filter() const;
  // google-benchmark regex: our benchmarks, the peers of the selected op/dtype, and the probe.
  std::string benchmark_regex() const;
};

}  // namespace opf::suites
