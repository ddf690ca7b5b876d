#include "matrix/emit.h"

namespace opf::matrix {

json::Value emit_github(const Plan& plan, const std::string& plan_path, size_t chunk) {
  json::Value v;
  v.set("schema", "opforge.github-matrix/1");
  v.set("plan", plan_path);
  v.set("cells", int64_t(plan.cells.size()));
  json::Value chunks = json::Array{};
  for (size_t i = 0; i < plan.cells.size(); i += chunk) {
    json::Value include = json::Array{};
    for (size_t k = i; k < std::min(plan.cells.size(), i + chunk); ++k) {
      json::Value e;
      e.set("cell", plan.cells[k].id);
      e.set("name", plan.cells[k].name);
      include.push(e);
    }
    json::Value c;
    c.set("include", include);
    chunks.push(c);
  }
  v.set("chunks", chunks);
  return v;
}

SlurmFiles emit_slurm(const Plan& plan, const std::string& plan_path, const std::string& out_dir) {
  SlurmFiles f;
  for (const auto& c : plan.cells) f.index += c.id + "\n";
  size_t n = plan.cells.size();
  f.script =
      "#!/bin/bash\n"
      "# opforge matrix: one Slurm array task per cell of " +
      plan.matrix_path + " (" + std::to_string(n) +
      " cells).\n"
      "# Submit from the source root: sbatch " +
      out_dir +
      "/matrix.sbatch\n"
      "# Then: opforge merge -o results/runs/<name> " +
      out_dir +
      "/bundles/*\n"
      "#SBATCH --job-name=opforge-matrix\n"
      "#SBATCH --array=0-" +
      std::to_string(n ? n - 1 : 0) +
      "\n"
      "#SBATCH --output=" +
      out_dir +
      "/logs/%A_%a.out\n"
      "#SBATCH --cpus-per-task=2\n"
      "set -euo pipefail\n"
      "CELL=$(sed -n \"$((SLURM_ARRAY_TASK_ID + 1))p\" " +
      out_dir +
      "/cells.txt)\n"
      "exec ${OPFORGE:-opforge} matrix run " +
      plan_path + " --cell \"$CELL\" --out " + out_dir + "/bundles/\"$CELL\"\n";
  return f;
}

}  // namespace opf::matrix
