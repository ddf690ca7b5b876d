// The in-memory model of a PyTorch host execution trace or a linked ("host + device") trace:
// the compact per-node facts the converter needs (not the JSON text). IOInfo strings are
// already rendered as Python str() (docs/chakra.md §3.6). All schemas map to this one model:
// 1.0.1 (flat "parent", "inputs"/"input_shapes"/..., attributes as top-level keys) and the
// nested 1.0.2 / 1.0.3 / 1.1.0 / 1.1.1 "-chakra.0.0.4" and "1.1.1-chakra.1.0.0" formats.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "string_pool.h"

namespace opf::chakra {

enum class EtSchema { v1_0_1, chakra_0_0_4, chakra_1_0_0 };

struct EtMetadata {
  std::string schema;
  // Python repr of each value as parsed (for the converter's log line) and whether present.
  std::string pid_repr, time_repr, start_ts_repr, finish_ts_repr;
  bool has_schema = false, has_pid = false, has_time = false, has_start_ts = false, has_finish_ts = false;
  uint64_t pid = 0, start_ts = 0, finish_ts = 0;
  std::string time;
  bool pid_ok = false, start_ts_ok = false, finish_ts_ok = false;  // fit uint64 (protobuf field kind)
  bool time_is_string = false;
};

// The integer attributes every converted node carries (docs/chakra.md §3.4), in output order.
enum IntAttr { kRfId, kFwParent, kSeqId, kScope, kTid, kFwTid, kIntAttrCount };
extern const char* const kIntAttrNames[kIntAttrCount];

struct HostNode {
  int64_t id = 0;
  int64_t parent = 0;  // ctrl_deps (nested formats) / parent (1.0.1)
  int64_t inter_thread_dep = 0;
  int64_t stream = 0;
  int64_t duration = 0;   // int(exclusive_dur) (truncated), 0 when absent
  int64_t comm_size = 0;  // Σ num_elem × elem_bytes over the input tensors (docs/chakra.md §3.4)
  int64_t attr[kIntAttrCount] = {};
  PStr name, op_schema, pg_name;
  PStr in_values, in_shapes, in_types, out_values, out_shapes, out_types;
  double ts = 0;                   // linked traces: Kineto start, µs (has_ts)
  std::vector<int64_t> sync_deps;  // linked traces: ids this node waits for (default mode: edges)
  uint64_t offset = 0;             // byte offset of the node's JSON object (for messages)
  uint32_t attr_present = 0;       // bit per IntAttr, bit 6 = op_schema
  bool has_parent = false;
  bool has_inter_thread_dep = false;
  bool has_ts = false;
  bool stream_null = false;  // JSON "stream": null => no stream attribute
  bool is_gpu = false;       // has a non-null "cat" (only the linker adds it)
  bool comm_size_ok = true;  // false: the inputs do not have the tensor layout comm_size needs
  bool duration_negative = false;
};

// Nodes in fixed-size segments: appending never reallocates (no 2x peak while the parser
// threads' batches are moved in), and indexing stays O(1).
class NodeList {
 public:
  size_t size() const { return n_; }
  HostNode& operator[](size_t i) { return segs_[i >> kShift][i & kMask]; }
  const HostNode& operator[](size_t i) const { return segs_[i >> kShift][i & kMask]; }
  void push_back(HostNode&& x) {
    if ((n_ & kMask) == 0) segs_.emplace_back(new HostNode[kMask + 1]);
    segs_.back()[n_ & kMask] = std::move(x);
    ++n_;
  }

 private:
  static constexpr size_t kShift = 12, kMask = (size_t(1) << kShift) - 1;
  std::vector<std::unique_ptr<HostNode[]>> segs_;
  size_t n_ = 0;
};

struct HostTrace {
  std::string path;
  EtMetadata meta;
  EtSchema schema = EtSchema::chakra_0_0_4;
  NodeList nodes;                                  // JSON order
  std::vector<std::unique_ptr<StringPool>> pools;  // text of the nodes (one per parser thread)
};

struct ReadOptions {
  bool compat_reference = false;  // reject the schemas the reference rejects (1.0.1, 1.1.1-chakra.1.0.0)
  unsigned parser_threads = 0;    // 0: min(4, cores); OPFORGE_CHAKRA_THREADS overrides either
};

// Reads a host ET / linked JSON (optionally gzip), streaming: memory grows with the node
// count, not with the JSON text. Throws InputError (file, byte offset / node, problem).
HostTrace read_host_et(const std::string& path, const ReadOptions& opt = {});

}  // namespace opf::chakra
