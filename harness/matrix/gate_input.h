// What the gate compares, read from a recorded run (results/runs/<run>/) or from a baseline file
// (schema opforge.baseline/1, results/baselines/*.json, written from a run by
// `opforge gate --current RUN --write-baseline FILE`). Results are keyed by cell *name* so a
// baseline recorded elsewhere (other toolchain, other cell ids) still lines up.
#pragma once

#include <string>
#include <vector>

#include "matrix/json.h"

namespace opf::matrix {

struct BenchSamples {
  std::string cell, name;
  std::vector<double> ns;       // real time per iteration, one entry per repetition
  double bytes_per_second = 0;  // mean over repetitions (0 when the benchmark sets no bytes)
  std::string key() const { return cell + "/" + name; }
};

struct TestOutcome {
  std::string cell, key, result;  // pass, fail, skip
};

struct ChakraOutcome {
  std::string cell, trace, status;  // pass, fail, ...
  std::string golden;               // digest of the golden/produced graph, when reported
  double seconds = 0;               // conversion time, when reported
};

// Callgrind instruction counts (schema opforge.callgrind/2, cells/<id>/callgrind.json):
// {"schema": "opforge.callgrind/2", "benchmarks": [{"name": ..., "instructions": N,
// "library_instructions": L}]}. The gate decides on `instructions` (the code outside the system
// libraries, the same on every machine); L, where known, tells a reader whether work only moved
// between the kernel and, say, glibc's memset.
struct InstrCount {
  std::string cell, name;
  double instructions = 0;
  double library_instructions = -1;  // per call in the system libraries; < 0: not recorded
};

struct GateInput {
  std::string origin;
  json::Value meta;  // git, machine, run name
  std::vector<BenchSamples> bench;
  std::vector<TestOutcome> tests;
  std::vector<ChakraOutcome> chakra;
  std::vector<InstrCount> instr;
};

// google-benchmark JSON (unchanged output of --benchmark_out): per-repetition iteration entries.
std::vector<BenchSamples> read_benchmark_json(const std::string& path, const std::string& cell);
std::vector<ChakraOutcome> read_chakra_json(const std::string& path, const std::string& cell);
std::vector<InstrCount> read_callgrind_json(const std::string& path, const std::string& cell);

GateInput read_gate_input(const std::string& run_dir_or_file);  // throws opf::Error naming the input
json::Value baseline_json(const GateInput& in);

}  // namespace opf::matrix
