// `opforge merge`: per-cell result bundles (each a run directory written by
// `opforge matrix run ... --cell ID --out DIR`, e.g. one per Slurm array task or GitHub job)
// combined into one run that `opforge report` and `opforge gate` read like any other.
#pragma once

#include <string>
#include <vector>

namespace opf::matrix {

struct MergeResult {
  std::string run_dir;
  int cells = 0;
  std::vector<std::string> warnings;  // e.g. bundles from different commits
};

// Builds the merged run in <out>.tmp and renames it to <out>; never overwrites an existing run.
MergeResult merge_runs(const std::vector<std::string>& bundles, const std::string& out);

}  // namespace opf::matrix
