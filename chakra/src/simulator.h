// The reference converter's `--simulate` (docs/chakra.md §3.10): one CPU shared by all threads, one
// in-order queue per GPU stream, 1 µs ticks, dependents released when a node is *issued*, a
// 0-duration node occupying its resource for one tick. Same log lines as the reference, but
// event-driven: idle ticks are skipped (jump to the next completion), so the cost is
// O((nodes + edges) log nodes), independent of the simulated time span.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "et_graph.h"

namespace opf::chakra {

struct SimResult {
  uint64_t makespan = 0;  // time of the last completion
  size_t issued = 0;      // nodes that ran (< nodes.size() if some never became ready)
};

// What ran when: node index in `nodes`, issue tick and completion tick (µs). A node holds its
// resource (the CPU, or its stream) for [start, end).
using SimSpan = std::function<void(uint32_t node, uint64_t start, uint64_t end)>;

// `emit` receives each log line (without the "LEVEL [date] " prefix); `span`, if set, each
// completed node (for timelines).
SimResult simulate(const std::vector<EtNode>& nodes, const std::function<void(const std::string&)>& emit,
                   const SimSpan& span = {});

}  // namespace opf::chakra
