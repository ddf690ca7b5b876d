// Where a run's records live (documented in results/README.md):
//   results/runs/<utc-stamp>-<host>/run.json, plan.json, gpu_debt.json, report.{md,html}
//   .../cells/<cell-id>/cell.json (written last: its presence means the cell finished)
#pragma once

#include <string>
#include <vector>

#include "matrix/json.h"

namespace opf::matrix {

// A run given as a directory, or as a name under <results>/runs/. Throws when neither exists.
std::string resolve_run(const std::string& arg, const std::string& source_dir);
std::vector<std::string> cell_dirs(const std::string& run_dir);  // sorted
// cells/<id>/cell.json of every finished cell (status pass or fail)
std::vector<json::Value> finished_cells(const std::string& run_dir);
bool cell_finished(const std::string& cell_dir);
// The GPU debt ledger of a run (schema opforge.gpu-debt/1) from its finished cells.
json::Value gpu_debt_ledger(const std::string& run_dir, const std::string& commit);

}  // namespace opf::matrix
