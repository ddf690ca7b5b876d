// How `opforge test` / `opforge bench` find and run the suite executables: they are built next to
// the CLI (build/harness/suites/), so the CLI looks beside its own binary first, then in the
// build tree recorded at configure time.
#pragma once

#include <string>
#include <vector>

namespace opf::suites {

// Absolute path of suite executable `name`; throws opf::Error naming where it looked.
std::string find_suite_executable(const std::string& name);

// Runs argv[0] with argv, stdout/stderr inherited; returns its exit status (128+signal if killed).
int run_child(const std::vector<std::string>& argv);

}  // namespace opf::suites
