// A plan: the concrete cells of a matrix, each with a stable id (hash of its sorted options and
// the toolchain identity), the cells dropped by exclude rules (with the reason) and the numbers
// that show what pairwise generation saved.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "matrix/json.h"
#include "matrix/matrix_spec.h"

namespace opf::matrix {

struct Cell {
  std::string id;
  std::string name;
  std::string origin;  // cell, corner:<kind>, pairwise
  Options options;     // base + cell options (Meson defaults for the rest)
};

struct Excluded {
  std::string name;
  Options options;
  std::string reason;
  std::string where;
};

struct Plan {
  std::string matrix_path;
  std::string toolchain;
  std::vector<Axis> axes;
  std::vector<Cell> cells;
  std::vector<Excluded> excluded;
  double cartesian = 0;  // cells of the full cartesian product of the axes
  int64_t pairs_total = 0;
  int64_t pairs_infeasible = 0;
  RunSettings run;
  std::string matrix_text;

  json::Value to_json() const;
  static Plan from_json(const json::Value& v, const std::string& origin);
  const Cell* find(const std::string& id_or_name) const;
};

Plan make_plan(const MatrixSpec& spec, const OptionCatalog& catalog, const std::string& toolchain);
std::string cell_id(const Options& options, const std::string& toolchain);
// The Meson machine file for a cell: [built-in options] and [project options].
std::string native_file(const Cell& cell, const OptionCatalog& catalog);
// Identity of the compiler this opforge was built with ("gcc 12.2.0"); part of every cell id.
std::string toolchain_identity();
// "k=v k=v" for tables.
std::string options_summary(const Options& o);

}  // namespace opf::matrix
