// The parts of a Kineto (PyTorch profiler chrome-trace) JSON file the linker uses, classified
// as the reference linker does (docs/chakra.md §4.2). Only the classified events are kept, as
// compact records, so memory grows with the kept events, not with the JSON text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "py_num.h"
#include "string_pool.h"

namespace opf::chakra {

constexpr int64_t kNoExternalId = -1;  // the reference's default for a missing "External id"

// cat in {cpu_op, user_annotation} and the name does not contain "ProfilerStep".
struct KinetoCpuOp {
  PyNum ts, dur;
  PyNum exclusive;     // filled by compute_exclusive_durations
  uint32_t event = 0;  // index in traceEvents (file order: the stable-sort tie-break)
  uint32_t tid = 0;    // interned tid (KinetoTrace::tids)
  int64_t external_id = kNoExternalId;
  int64_t rf_id = 0;
  bool has_rf_id = false;
  std::string_view name;
};

// cat in {cuda_runtime, cuda_driver} and the name is a kernel-launch / memcpy API.
struct KinetoLaunch {
  PyNum ts;
  uint32_t event = 0;
  uint32_t tid = 0;
  int64_t external_id = kNoExternalId;
  int64_t correlation = -1;
};

// cat in {kernel, gpu_memcpy}.
struct KinetoGpuOp {
  PyNum ts, dur;
  uint32_t event = 0;
  int64_t external_id = kNoExternalId;
  int64_t correlation = -1;
  std::string_view name, cat;
  std::string_view ph_json;       // Python-json text of "ph" ("null" when absent)
  std::string_view stream_json;   // Python-json text of args.stream ("null" when absent)
  std::string_view pg_name_json;  // Python-json text of args["Process Group Name"]; empty if absent
};

// CUDA/HIP host-side synchronisation calls and the device-side cuda_sync records that say which
// stream they waited on (for the narrow sync-dependency pass, docs/chakra.md §4.3 / §8).
struct KinetoSyncCall {
  PyNum ts, dur;
  uint32_t event = 0;
  uint32_t tid = 0;
  int64_t external_id = kNoExternalId;
  int64_t correlation = -1;
  bool device_wide = false;  // cudaDeviceSynchronize / hipDeviceSynchronize
};
struct KinetoSyncRecord {
  int64_t correlation = -1;
  std::string_view stream_json;
};

struct KinetoTrace {
  std::string path;
  std::vector<KinetoCpuOp> cpu;  // all sorted by (ts, event) after reading
  std::vector<KinetoLaunch> launches;
  std::vector<KinetoGpuOp> gpu;
  std::vector<KinetoSyncCall> sync_calls;
  std::vector<KinetoSyncRecord> sync_records;
  std::vector<std::string> tids;  // interned tid values (Python-json text), first-seen order
  // The first "ProfilerStep" annotation (by ts), if any: the window of the sync-dependency pass.
  std::optional<std::pair<PyNum, PyNum>> first_profiler_step;  // (ts, ts + dur)
  size_t events = 0;
  size_t ac2g = 0;
  StringPool pool;
};

// Reads FILE (.gz transparently). Throws InputError naming the file, the event and the problem:
// not JSON / truncated, no traceEvents array, an event that is not an object, a non-numeric or
// negative ts/dur on a kept event, integers beyond 64 bits, duplicate launch correlation ids.
KinetoTrace read_kineto_trace(const std::string& path);

// Launch-API allow-list of the reference (CUDA runtime/driver and HIP spellings).
bool is_kernel_launch_name(std::string_view name);

}  // namespace opf::chakra
