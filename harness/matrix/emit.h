// Hand-off of a plan to a distributed engine that already exists: GitHub Actions (a
// strategy.matrix include list; GitHub caps a matrix at 256 jobs, so the list is chunked) and
// Slurm (an sbatch array script plus an index file, one cell id per line).
#pragma once

#include <string>

#include "matrix/json.h"
#include "matrix/plan.h"

namespace opf::matrix {

inline constexpr size_t kGithubMatrixLimit = 256;

// {"schema": "opforge.github-matrix/1", "chunks": [{"include": [{"cell", "name"}, ...]}, ...]}
json::Value emit_github(const Plan& plan, const std::string& plan_path, size_t chunk = kGithubMatrixLimit);

struct SlurmFiles {
  std::string script;  // matrix.sbatch
  std::string index;   // cells.txt
};
// Each array task runs `opforge matrix run <plan_path> --cell <id> --out <bundles>/<id>`;
// `opforge merge` then combines the bundles into one run.
SlurmFiles emit_slurm(const Plan& plan, const std::string& plan_path, const std::string& out_dir);

}  // namespace opf::matrix
