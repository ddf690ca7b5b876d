// The Kineto-side phases of `link_traces` (trace_linker.cpp), in the order it runs them: exclusive
// durations per thread, the matching key of each CPU op (Record function id, or External id with a
// per-host-thread offset), GPU op -> launching CPU op, inter-thread dependencies and the narrow sync
// dependencies (docs/chakra.md §4). Internal to chakra/link.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "host_et_index.h"
#include "kineto_trace.h"
#include "trace_linker.h"

namespace opf::chakra::linker {

constexpr int32_t kNone = -1;

// Matching facts per Kineto CPU op.
struct CpuLink {
  int32_t host = kNone;  // host node (index) linked to this Kineto op, last one wins
  bool has_key = false;  // the op carries a matching key (rf_id or External id - offset)
  int64_t key = 0;
  bool has_itd = false;  // inter-thread dependency (key of the op in another thread)
  int64_t itd_key = 0;
};

// CPU op positions (in ts order) per tid, tids in order of first CPU op (dict insertion order).
using OpsByThread = std::vector<std::vector<uint32_t>>;

std::string num_text(const PyNum& n);

OpsByThread group_cpu_ops_by_thread(const KinetoTrace& kt);

// Fills KinetoCpuOp::exclusive; throws InputError where the reference aborts (negative result).
void assign_exclusive_durations(KinetoTrace& kt, const OpsByThread& by_tid, bool compat,
                                const std::string& kineto_path);

// Record function id mode (else External id): always in compat, else when any op has a nonzero one.
bool uses_record_function_id(const KinetoTrace& kt, bool compat);

// External-id mode: host tid -> External id - rf_id; records the offsets in `st`.
std::unordered_map<int64_t, int64_t> detect_external_id_offsets(const KinetoTrace& kt, const HostEtIndex& host,
                                                                LinkStats& st);

std::vector<CpuLink> assign_match_keys(const KinetoTrace& kt, bool use_rf);

// Key -> CPU op (index), the last writer in ts order.
std::unordered_map<int64_t, uint32_t> index_ops_by_key(const std::vector<CpuLink>& cl, bool compat, bool use_rf);

// External id of the launching CPU op -> GPU ops (index); counts parented/orphaned GPU ops in `st`.
std::unordered_map<int64_t, std::vector<uint32_t>> parent_gpu_ops_to_cpu_ops(const KinetoTrace& kt, LinkStats& st);

void link_inter_thread_deps(const KinetoTrace& kt, const OpsByThread& by_tid, std::vector<CpuLink>& cl);

// GPU op (index) -> CPU ops (index) that must wait for it.
std::unordered_map<uint32_t, std::vector<uint32_t>> find_sync_deps(const KinetoTrace& kt, const OpsByThread& by_tid);

}  // namespace opf::chakra::linker
