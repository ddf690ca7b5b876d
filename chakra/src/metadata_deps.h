// Default-mode fix for simulators that treat METADATA nodes as no-ops: ASTRA-sim completes a
// METADATA node without issuing the children it frees, so a COMP/COMM node waiting on one never
// runs and the whole replay stalls (docs/chakra.md §2.2; on the corpus's 1.0.2 host trace it
// stops after two nodes: `process_group:init` (3) sits between the thread root (2) and all the
// real work).
//
// Every dependency of a non-METADATA node on a METADATA node is replaced by that node's own
// dependencies, followed through chains of METADATA nodes. This is stricter than "never on a
// METADATA node alone": a node waiting on {M, P} where M itself waits on P would still stall,
// because M completes last. The METADATA node keeps its own dependencies (it is still written).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "et_graph.h"

namespace opf::chakra {

// is_metadata[k] tells whether graph[k] is a METADATA node. Rewrites data_deps in place (order
// kept, first occurrence wins) and returns how many nodes changed. Dependencies on ids that are
// not in the graph are left alone (the validator reports them); a cycle among METADATA nodes
// contributes no parents (the validator reports the cycle).
size_t bypass_metadata_data_deps(std::vector<EtNode>& graph, const std::vector<bool>& is_metadata);

}  // namespace opf::chakra
