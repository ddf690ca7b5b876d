// `opforge-kernel-bench --ab-serve`: the benchmark binary as a long-lived child of `opforge ab`,
// which drives two of them (base and head builds) alternately. A case is staged once per process
// and then timed in short blocks on command, so the pairing happens between the two builds'
// processes, benchmark by benchmark, instead of between two whole runs minutes apart.
// Line protocol on stdin/stdout (one request, one reply, flushed):
//   list                 -> one case name per line, then "."
//   prepare NAME         -> "ok" | "error <one line>"
//   restage NAME         -> "ok" | "error <one line>"   (the prepared case in new buffers)
//   time NAME SECONDS    -> "ns <median ns per call> <calls>" | "error <one line>"
//   quit                 -> (exits 0)
// Anything else gets "error unknown request '<it>'" and the server keeps serving.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace opf::suites {

struct ServeTarget {
  std::function<std::vector<std::string>()> list;
  // "" when staged; else why the case cannot run
  std::function<std::string(const std::string& name)> prepare;
  // The prepared case staged again in new buffers (same data); "" or why not
  std::function<std::string(const std::string& name)> restage;
  // Runs the staged case for at least `seconds` of timed calls (>= 1 call); median ns per call.
  // Throws std::exception with the reason.
  std::function<double(const std::string& name, double seconds, int64_t& calls)> time;
};

// Serves until "quit" or end of input; returns the process exit code (0).
int serve_ab(std::FILE* in, std::FILE* out, const ServeTarget& target);

// Median of per-call seconds, in ns.
double median_ns(std::vector<double> seconds);

}  // namespace opf::suites
