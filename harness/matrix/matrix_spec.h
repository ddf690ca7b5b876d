// A build matrix as written in matrices/*.toml (format documented in matrices/README.md):
// base options, axes (Meson options or the @ops / @backends groups read from the manifest),
// named cells and corners, exclude rules with reasons, run settings. Every option name and value
// is checked against `meson introspect`; errors are one line `file:line:col: problem`.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "matrix/meson_options.h"

namespace opf::matrix {

using Options = std::map<std::string, std::string>;  // option name -> native-file literal

struct Axis {
  std::string option;
  std::vector<std::string> literals;
};

struct Rule {
  Options when;
  std::string reason;
  std::string where;  // file:line
};

struct NamedCell {
  std::string name;
  std::string origin;  // "cell" or "corner:<kind>"
  Options options;
  std::string where;
};

struct RunSettings {
  bool bench = false;
  bool callgrind = false;  // instruction counts of the cpu kernels (valgrind --tool=callgrind)
  std::vector<std::string> bench_args{"--benchmark_repetitions=5", "--benchmark_min_time=0.05"};
  std::map<std::string, double> timeouts{{"setup", 300},  {"compile", 3600},  {"test", 1800},  {"inventory", 300},
                                         {"bench", 1800}, {"callgrind", 300}, {"chakra", 1800}};
};

struct MatrixSpec {
  std::string path;
  std::string text;  // file content, recorded in the run manifest
  std::string description;
  Options base;
  std::vector<Axis> axes;
  std::string generate;  // "" or "pairwise"
  std::vector<Rule> excludes;
  std::vector<NamedCell> cells;
  RunSettings run;
};

MatrixSpec read_matrix(const std::string& path, const OptionCatalog& catalog, const OpManifest& manifest);
// Same, from text (tests); `path` only names the origin in errors.
MatrixSpec parse_matrix(const std::string& text, const std::string& path, const OptionCatalog& catalog,
                        const OpManifest& manifest);

}  // namespace opf::matrix
