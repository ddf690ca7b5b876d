// The CI regression gate. Per benchmark: Mann-Whitney U over the repetitions plus a relative
// threshold on the median ratio (current / baseline):
//   SAME       |ratio - 1| <= threshold
//   SLOWER     significantly (Mann-Whitney p < alpha) slower than baseline x (1 + threshold)
//              -> regression (exit 1)
//   FASTER     significantly faster than baseline x (1 - threshold)
//   AMBIGUOUS  beyond the threshold but not significant (too noisy or too few repetitions)
// Drift: a baseline comes from another day, and the machine moves between runs (the bandwidth
// probe itself moved 12 % between two runs here). Every run carries controls whose code a change
// does not touch: the probe (`probe/stream_triad/threads:N`) and the peers (`peer/...`). A verdict
// beyond the threshold is re-decided on samples normalized by the controls of the same cell and
// thread count: memory-bound benchmarks (baseline >= 50 % of the probe's bandwidth) by the probe's
// median ratio, the others by the median ratio of the peers (at least 3); the verdict stays SLOWER
// (or FASTER) only when the normalized samples say so too, else it is the normalized verdict, and
// the report says which normalization decided. Controls themselves never fail the gate.
// Instruction counts (callgrind) are deterministic: beyond their own threshold is a regression.
// A test that passed in the baseline and fails now, and a Chakra trace whose regression status
// or golden digest changed, are regressions too. Exit: 0 none, 1 confirmed regression.
#pragma once

#include <string>
#include <vector>

#include "matrix/gate_input.h"

namespace opf::matrix {

struct GateOverride {
  std::string match;      // glob over "<cell>/<benchmark>" (fnmatch)
  double threshold = -1;  // < 0: keep the default
  bool ignore = false;
  std::string reason;
};

struct GateConfig {
  double threshold = 0.05;
  double alpha = 0.05;
  double instr_threshold = 0.01;
  // false: timing verdicts are reported but never fail (CI on shared runners, whose load differs
  // from the baseline machine's; instruction counts, correctness and Chakra still gate)
  bool timing_gates = true;
  std::vector<GateOverride> overrides;
};

// TOML: [[override]] match = "prebuilt/layer_norm/cpu/bf16/*", threshold = 0.10, reason = "..."
//       or ignore = true. Errors name file:line.
std::vector<GateOverride> read_overrides(const std::string& path);

struct BenchVerdict {
  std::string key, verdict;  // SAME, SLOWER, FASTER, AMBIGUOUS, IGNORED, MISSING, NEW
  double ratio = 1, p = 1, threshold = 0;
  size_t n_base = 0, n_cur = 0;
  double base_median_ns = 0, cur_median_ns = 0;
  std::string note;
  bool control = false;            // probe or peer: reported, never a regression
  std::string decided_by = "raw";  // raw, probe, peers
  double drift = 1;                // the controls' median ratio used to normalize (1 = none)
};

struct SimpleChange {
  std::string key, verdict, detail;  // verdict: REGRESSION, FIXED, NEWLY-SKIPPED, MISSING, SAME, CHANGED
};

struct GateReport {
  std::vector<BenchVerdict> bench;
  std::vector<SimpleChange> instr, tests, chakra;
  double geomean = 1;  // of median ratios of compared benchmarks
  int compared = 0;
  bool timing_gates = true;
  int regressions() const;
  int exit_code() const { return regressions() ? 1 : 0; }
};

GateReport run_gate(const GateInput& base, const GateInput& cur, const GateConfig& cfg);
std::string gate_markdown(const GateReport& r, const std::string& base_name, const std::string& cur_name);

}  // namespace opf::matrix
