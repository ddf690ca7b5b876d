// `opforge chakra link`: joins a PyTorch host execution trace with the Kineto trace of the
// same run into the linked ("host + device") JSON the converter reads (docs/chakra.md §4).
//
// Compat mode (--compat reference) reproduces the reference linker's graph: rf_id <->
// "Record function id" matching restricted to the process root's subtree, the equal-ts tie
// quirk in exclusive times, fresh ids minted for parents that are not nodes, the sync_dep
// double id-mapping, and the exclusive-time "negative duration" error.
// Default mode also links traces without "Record function id" (older PyTorch) through
// "External id" (detecting a constant rf_id/External-id offset), subtracts a child that starts
// together with its parent, maps parents that are not nodes to null, and never mints ids.
#pragma once

#include <cstdint>
#include <string>

namespace opf::chakra {

struct LinkOptions {
  std::string host_path, kineto_path, output_path;
  int64_t rank = 0;
  bool compat_reference = false;
  bool pretty = false;  // json.dump(indent=4) layout; always on in compat mode (byte-identical output)
};

struct LinkStats {
  size_t host_nodes = 0;
  size_t candidates = 0;             // host nodes eligible for matching (with an rf_id)
  size_t matched = 0;                // host nodes that got Kineto timing
  size_t matched_name_mismatch = 0;  // rf_id mode: matched to an op of another name (not the same run?);
                                     // External-id mode: candidates rejected because the names differ
  size_t kineto_cpu_ops = 0, kineto_launches = 0, kineto_gpu_ops = 0;
  size_t gpu_ops_parented = 0;   // GPU ops that found a launching CPU op
  size_t gpu_ops_orphaned = 0;   // no launch for their correlation id / no CPU op before it
  size_t gpu_nodes_emitted = 0;  // GPU copies written (one per GPU op per host op that owns it)
  size_t inter_thread_deps = 0;  // nodes written with a non-null inter_thread_dep
  size_t sync_dep_nodes = 0;     // nodes written with a sync_dep list
  size_t output_nodes = 0;
  std::string match_key;           // "Record function id" or "External id"
  int64_t external_id_offset = 0;  // External id = rf_id + offset, for the largest host thread
  size_t external_id_offset_nodes = 0;
  std::string external_id_offsets;  // per host thread, "host tid 1: +12462, host tid 2: +..."
};

// Writes the linked JSON atomically (temp file + rename). Throws InputError on bad input.
LinkStats link_traces(const LinkOptions& opt);

}  // namespace opf::chakra
