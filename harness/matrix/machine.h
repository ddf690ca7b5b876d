// Facts about where a run happened, for the run manifest: git state of the source tree,
// toolchain versions, CPU, and a measured memory bandwidth (STREAM-style triad) so benchmark
// numbers can be read as a fraction of what this machine can move.
#pragma once

#include <string>

#include "matrix/json.h"

namespace opf::matrix {

json::Value git_state(const std::string& source_dir);  // {sha, dirty, branch}
json::Value toolchain_versions();                      // {meson, ninja, cxx, nvcc, hipcc, ccache}
json::Value machine_facts();                           // {host, cpu_model, cores, mem_gb, kernel}
// Single-thread triad a = b + s*c over arrays far larger than the LLC; best of `reps`, GB/s
// counting 3 arrays moved (STREAM convention).
json::Value bandwidth_probe(size_t bytes_per_array = size_t(64) << 20, int reps = 5);
std::string host_name();

}  // namespace opf::matrix
