// `opforge matrix run`: every cell in its own build dir, configured by a generated Meson native
// file, ccache on (Meson picks it up); steps setup, compile, test, inventory, bench (when asked),
// chakra (when the cell's opforge has `chakra regress`). Each step has a timeout; a crashing or
// hanging cell is recorded and the run goes on; Ctrl-C stops the current steps, keeps every
// finished cell, and `--resume` runs only what is not finished.
#pragma once

#include <string>
#include <vector>

#include "matrix/gate_input.h"
#include "matrix/load_plan.h"

namespace opf::matrix {

struct RunOptions {
  std::string run_dir;             // "" = <source>/results/runs/<utc-stamp>-<host>
  bool resume = false;             // run_dir exists: continue it with its own plan.json
  int jobs = 1;                    // cells at a time
  int bench = -1;                  // -1: plan's [run] bench; 0/1: override
  double step_timeout = 0;         // > 0 overrides every step's timeout
  std::vector<std::string> cells;  // ids or names; empty = all
  bool keep_builds = false;        // keep each cell's build (build_dir_beside_source) after it is recorded
  bool measure_bandwidth = true;
};

struct RunSummary {
  std::string run_dir;
  int total = 0, passed = 0, failed = 0, skipped_finished = 0;
  bool interrupted = false;
};

RunSummary run_matrix(const PlanSource& ps, const RunOptions& opt);

// Asks running steps to stop (what SIGINT does).
void request_stop();

// Why the Chakra step's per-trace outcomes (read_chakra_json, as the report and the gate read them)
// show no trace converted, or "" when at least one passed: the step fails then, even on exit 0.
std::string chakra_no_work_reason(const std::vector<ChakraOutcome>& traces);

}  // namespace opf::matrix
