// Turns what a user passes (a matrices/*.toml file, or a plan JSON emitted earlier) into a Plan.
#pragma once

#include <string>

#include "matrix/plan.h"

namespace opf::matrix {

struct PlanSource {
  Plan plan;
  OptionCatalog catalog;  // empty when the plan came from JSON and no source dir was given
  std::string source_dir;
};

// `source_dir` is the project to introspect ("" = the tree this opforge was built from).
PlanSource load_plan(const std::string& path, const std::string& source_dir);
std::string default_source_dir();

}  // namespace opf::matrix
