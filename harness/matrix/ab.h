// `opforge ab`: an A/B comparison of two builds on one machine in one go (asv's `continuous`).
// Both trees (git revisions exported with `git archive`, source directories, or existing build
// directories) are built in prebuilt mode with the same options, then their benchmark binaries
// run side by side as --ab-serve children: per benchmark, both stage the case once, then time it
// in short blocks alternately (base head, head base, ...) for N rounds. Each round gives one
// paired ratio head/base; the verdict comes from those ratios (paired_verdict.h), so drift of the
// machine between rounds cancels. A SLOWER verdict stands only when a second pair of processes,
// started in the other order, says SLOWER too over `rounds` fresh rounds: biases that last as long
// as a process (where its buffers landed, the core it settled on) are not removed by pairing
// within one pair, and a false alarm then needs two independent pairs to agree. Instruction counts (callgrind) of both
// builds gate exactly where valgrind runs. Exit: 0 no regression, 1 a confirmed regression, 2 bad input or a failed
// build.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace opf::matrix {

struct AbOptions {
  std::string base, head;        // revision, source directory or build directory
  std::string repo;              // git repository revisions are read from ("" = this opforge's source)
  std::string out;               // results and builds (kept, reused by a later run with the same out)
  std::vector<std::string> ops;  // only these ops (and a reduced build); empty = all
  std::string filter;            // ECMAScript regex over benchmark names (controls always run)
  bool peers = false;            // also time the peers (as controls: the same code in both builds)
  int rounds = 10;
  int repeat = 1;              // > 1: that many runs, each in its own pair of processes (false-alarm studies)
  double block_seconds = 0.1;  // timed calls per block: at least this long
  bool restage = true;         // both sides stage the case in new buffers before every round
  bool confirm = true;         // a SLOWER is confirmed by `rounds` more rounds in a second pair of processes
  double threshold = 0.05, alpha = 0.05, instr_threshold = 0.01;
  bool instructions = true;
  bool force = false;                      // replace an existing out/ab.json
  bool no_build = false;                   // use build directories as they are (no ninja)
  bool skip_identical = false;             // no timing for ops whose CPU module is byte-identical in both builds
  std::vector<std::string> meson_options;  // extra -Dkey=value for both builds
  std::vector<std::pair<std::string, std::string>> base_env, head_env;  // for that side's benchmark server
};

// Returns the exit code (0 or 1); throws opf::Error (exit 2) on bad input or a failed build.
int run_ab(const AbOptions& opt);

}  // namespace opf::matrix
