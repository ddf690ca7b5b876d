// PyTorch host ET / linked JSON -> Chakra .et (docs/chakra.md §3): node classification, ctrl deps,
// data deps from the per-thread pre-order walk, comm nodes (type, size, process group),
// dangling-node removal, validation, writing; optional reference-style log and simulation.
//
// compat_reference reproduces the reference converter byte for byte, bugs included. The
// default mode fixes these reference behaviours (each one covered by a test in
// chakra/tests/test_converter.cpp; see also chakra/src/README.md):
//  * schemas 1.0.1 (PyTorch <= 2.0 flat format) and 1.1.1-chakra.1.0.0 are read (the reference
//    rejects the first and crashes on the second);
//  * an NCCL kernel whose name gives no known collective type no longer aborts the whole
//    conversion: "reduce"/"gather"/"scatter"/"barrier" map to REDUCE/GATHER/SCATTER/BARRIER,
//    anything else stays a COMM_COLL_NODE without comm_type and a warning names the node;
//  * no ctrl dep points to a node that is not in the output (the reference keeps thread roots'
//    ctrl_deps=[0] after removing the process root 0 as dangling);
//  * an input whose tensors do not have the 6-tuple layout gets comm_size 0 and a warning
//    instead of an IndexError.
//  * no node depends (data or ctrl) on a METADATA node: such deps move to the METADATA node's
//    parents, because ASTRA-sim never issues the children a METADATA node frees (metadata_deps.h);
//  * start_time_micros is written where the input has a start (`ts` of linked traces).
// Both modes: duplicate ids, deps on missing nodes, cycles and negative durations are one-line
// errors naming the node; the output appears only complete (temp file + rename).
#pragma once

#include <functional>
#include <string>

namespace opf::chakra {

struct ConvertOptions {
  bool compat_reference = false;
  bool simulate = false;
  std::string log_path;                              // reference-format debug log; empty = none
  unsigned parser_threads = 0;                       // node-parser threads of the reader (0: its default)
  std::function<void(const std::string&)> warn;      // default: stderr
  std::function<void(const std::string&)> sim_line;  // default: stdout (when no log file)
};

struct ConvertStats {
  size_t json_nodes = 0, written_nodes = 0, removed_dangling = 0, warnings = 0;
  // default mode: sync_dep entries turned into data deps, and those left out (no written node
  // with that id / the dependency does not start before the node / it would close a cycle)
  size_t sync_deps = 0, sync_deps_missing = 0, sync_deps_not_earlier = 0, sync_deps_cyclic = 0;
  // default mode: nodes whose data deps on METADATA nodes were moved to those nodes' parents
  size_t metadata_bypassed = 0;
};

ConvertStats convert(const std::string& in_path, const std::string& out_path, const ConvertOptions& opt);

}  // namespace opf::chakra
