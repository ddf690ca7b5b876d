// Per-case test results of one cell, read from what the suites already write: Meson's JUnit XML
// (testlog.junit.xml, which embeds GoogleTest's per-case XML for protocol 'gtest' tests),
// GoogleTest JSON files (GTEST_OUTPUT, for exitcode-protocol tests) and Meson's testlog.json
// (whole-test results, e.g. a crashed executable). Skips are kept with their reason: a skip for
// lack of a device is GPU debt, owed, never counted as passed.
#pragma once

#include <string>
#include <vector>

#include "matrix/json.h"

namespace opf::matrix {

struct CaseResult {
  std::string key;      // suite.case (GoogleTest) or meson test name
  std::string result;   // pass, fail, skip
  std::string message;  // failure or skip message (first line)
  double seconds = 0;
};

std::vector<CaseResult> read_junit(const std::string& path);  // throws opf::Error on bad XML
std::vector<CaseResult> read_gtest_json(const std::string& path);
std::vector<CaseResult> read_meson_testlog(const std::string& path);  // testlog.json (JSON lines)

// Merged view of a cell's result directory: JUnit first (most detailed), then GoogleTest JSON,
// then Meson test entries that no per-case source explains.
std::vector<CaseResult> collect_cell_tests(const std::string& cell_dir);

// Skipped for lack of a device (CUDA/HIP/GPU/driver named in the case or its skip message).
bool is_gpu_debt(const CaseResult& c);

// The GPU benchmarks a google-benchmark JSON of opforge-kernel-bench says it could not run (its
// context's `opforge_not_run` lines naming a device), as skipped cases ("bench: N not run (...)"):
// owed to a device like the GPU tests. Empty when the file has no such lines or is unreadable.
std::vector<CaseResult> bench_gpu_debt(const std::string& bench_json_path);

json::Value cases_json(const std::vector<CaseResult>& cases);
std::vector<CaseResult> cases_from_json(const json::Value& v);

}  // namespace opf::matrix
