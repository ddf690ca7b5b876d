// `opforge chakra simulate IN.et... --timeline OUT.json`: the opforge simulator's schedule as a
// Chrome trace. One process per rank (the N of a PREFIX.N.et name, else the file's position),
// one thread per resource the simulator serializes: the CPU (all CPU ops), and per GPU stream
// one thread for compute kernels and one for communication — so events on one thread never
// overlap. An `X` event per node: issue time and time on the resource, in µs.
//
// Ranks are simulated independently, as `simulate` does for one file: the simulator has no
// model of the network, so a collective takes its own duration on each rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "et_load.h"

namespace opf::chakra {

struct RankGraph {
  std::string path;
  int64_t rank = 0;
  const LoadedEt* et = nullptr;
};

// The N in "PREFIX.N.et" / "PREFIX.N.et.gz", or `fallback`.
int64_t rank_of_path(const std::string& path, int64_t fallback);

// Builds the whole trace in memory and writes it atomically (nothing on error).
void write_sim_timeline(const std::vector<RankGraph>& ranks, const std::string& out_path);

}  // namespace opf::chakra
