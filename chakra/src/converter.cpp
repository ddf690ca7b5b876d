#include "converter.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <queue>
#include <stdexcept>
#include <unordered_map>

#include "atomic_output.h"
#include "et_graph.h"
#include "et_stream.h"
#include "host_et.h"
#include "id_index.h"
#include "input_error.h"
#include "metadata_deps.h"
#include "proto/et_def.pb.h"
#include "py_repr.h"
#include "ref_log.h"
#include "simulator.h"
#include "validator.h"
#include "wire.h"

namespace opf::chakra {

namespace {

using ChakraProtoMsg::NodeType;

constexpr std::string_view kThreadRootNames[] = {"[pytorch|profiler|execution_graph|thread]",
                                                 "[pytorch|profiler|execution_trace|thread]"};
constexpr uint32_t kNone = UINT32_MAX;

bool contains(std::string_view s, std::string_view sub) { return s.find(sub) != std::string_view::npos; }
bool is_thread_root(std::string_view name) { return name == kThreadRootNames[0] || name == kThreadRootNames[1]; }

enum class JType : uint8_t { kCpu, kGpu, kMetadata };

// converted node
struct Out {
  uint32_t src = 0;
  NodeType type = ChakraProtoMsg::COMP_NODE;
  int comm_type = -1;
  bool has_ctrl = false;
  bool removed = false;
  bool comm_size_zero = false;  // default mode: unusable tensor layout
  int64_t ctrl = 0;
  uint32_t gpos = UINT32_MAX;  // position in graph_ (which then owns the data deps)
  std::string_view pg_name;
  std::vector<uint64_t> data_deps;
};

// comm_type from the kernel name (docs/chakra.md §3.4); -1 = not recognised
int comm_type_of(std::string_view name, bool extended) {
  std::string norm;
  norm.reserve(name.size());
  for (char c : name)
    if (c != '_' && c != '-') norm.push_back(char(std::tolower(uint8_t(c))));
  if (contains(norm, "allreduce")) return ChakraProtoMsg::ALL_REDUCE;
  if (contains(norm, "alltoall")) return ChakraProtoMsg::ALL_TO_ALL;
  if (contains(norm, "allgather")) return ChakraProtoMsg::ALL_GATHER;
  if (contains(norm, "reducescatter")) return ChakraProtoMsg::REDUCE_SCATTER;
  if (contains(norm, "broadcast")) return ChakraProtoMsg::BROADCAST;
  if (contains(name, "ncclDevKernel_SendRecv")) return ChakraProtoMsg::ALL_TO_ALL;
  if (extended) {  // default mode: the NCCL kernels the reference aborts on
    if (contains(norm, "reduce")) return ChakraProtoMsg::REDUCE;
    if (contains(norm, "gather")) return ChakraProtoMsg::GATHER;
    if (contains(norm, "scatter")) return ChakraProtoMsg::SCATTER;
    if (contains(norm, "barrier")) return ChakraProtoMsg::BARRIER;
  }
  return -1;
}

// OPFORGE_CHAKRA_PROFILE=1 prints phase times to stderr (for tuning; benchmarks use the CLI)
struct PhaseTimer {
  bool on = std::getenv("OPFORGE_CHAKRA_PROFILE") != nullptr;
  std::chrono::steady_clock::time_point t = std::chrono::steady_clock::now();
  double cpu = cpu_ms();
  static double cpu_ms() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
  }
  void mark(const char* what) {
    if (!on) return;
    auto now = std::chrono::steady_clock::now();
    double c = cpu_ms();
    long hwm = 0;
    if (FILE* f = std::fopen("/proc/self/status", "r")) {
      char line[256];
      while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "VmHWM: %ld", &hwm) == 1) break;
      std::fclose(f);
    }
    std::fprintf(stderr, "[chakra] %-10s %7.1f ms wall %7.1f ms cpu, peak RSS %ld KB\n", what,
                 std::chrono::duration<double, std::milli>(now - t).count(), c - cpu, hwm);
    t = now;
    cpu = c;
  }
};

class Converter {
 public:
  Converter(const std::string& in, const std::string& out, const ConvertOptions& opt)
      : in_(in), out_path_(out), opt_(opt), log_(opt.log_path) {}

  ConvertStats run();

 private:
  [[noreturn]] void fail_node(const HostNode& n, const std::string& problem) const {
    throw InputError(
        in_, "byte " + std::to_string(n.offset) + " (node " + std::to_string(n.id) + " '" + std::string(n.name) + "')",
        problem);
  }
  void warn(const std::string& msg) {
    ++stats_.warnings;
    if (log_.enabled()) log_.warning(msg);
    if (opt_.warn) opt_.warn(msg);
    else std::fprintf(stderr, "opforge chakra: warning: %s\n", msg.c_str());
  }
  uint32_t find(int64_t id) const { return id < 0 ? kNone : index_.find(uint64_t(id)); }
  // a node that is in the output and not removed as dangling
  bool is_written(int64_t id) const {
    uint32_t i = find(id);
    return i != kNone && out_pos_[i] != kNone && !outs_[out_pos_[i]].removed;
  }
  // the steps of run(), in order
  void check_metadata() const;
  void log_metadata();
  void index_node_ids();
  void classify_nodes();
  void build_child_lists();
  void build_output_map();
  void convert_node(uint32_t i);
  void encode_deps();
  void add_sync_deps();
  void warn_skipped_sync_deps();
  void release_json_tree();
  void remove_dangling_nodes();
  std::vector<uint32_t> written_order() const;
  void drop_ctrl_to_unwritten(const std::vector<uint32_t>& final_order);
  template <class Alive>
  void reparent_metadata_ctrl(const std::vector<uint32_t>& final_order, const Alive& alive);
  void check_dep_ids() const;
  void build_graph_view(const std::vector<uint32_t>& final_order);
  void bypass_metadata(const std::vector<uint32_t>& final_order);
  void validate();
  void write(const std::vector<uint32_t>& final_order);
  void encode_node(const Out& o, std::string& buf) const;
  void run_simulation();

  const std::string& in_;
  const std::string& out_path_;
  const ConvertOptions& opt_;
  RefLog log_;
  HostTrace tr_;
  ConvertStats stats_;
  IdIndex index_;
  std::vector<JType> jtype_;
  std::vector<uint32_t> child_begin_, child_list_;              // JSON children (all), sorted by id descending
  std::vector<uint32_t> gpu_child_begin_, gpu_child_list_;      // GPU children in JSON order
  std::vector<uint32_t> out_pos_;                               // host index -> position in outs_ (kNone)
  std::vector<Out> outs_;                                       // output map, insertion order
  std::vector<std::pair<uint32_t, uint32_t>> sync_candidates_;  // (waiting, target) output positions
  std::vector<EtNode> graph_;                                   // written nodes, map order (validator, simulator)
};

void Converter::convert_node(uint32_t i) {
  if (out_pos_[i] != kNone) return;  // (only a METADATA-named GPU op could come twice)
  const HostNode& n = tr_.nodes[i];
  if (log_.enabled()) log_.debug("Converting JSON node ID " + std::to_string(n.id) + " to protobuf node.");
  Out o;
  o.src = i;
  if (n.has_parent) {
    uint32_t p = find(n.parent);
    if (p != kNone && out_pos_[p] != kNone) o.has_ctrl = true, o.ctrl = n.parent;
  }
  if (n.duration_negative) fail_node(n, "negative exclusive_dur (duration_micros is unsigned)");
  for (int a = 0; a < kIntAttrCount; ++a)
    if (!(n.attr_present & (1u << a))) fail_node(n, std::string("missing attribute '") + kIntAttrNames[a] + "'");
  if (!(n.attr_present & (1u << kIntAttrCount))) fail_node(n, "missing attribute 'op_schema'");
  o.pg_name = n.pg_name;
  const JType jt = jtype_[i];
  if (jt == JType::kMetadata) {
    o.type = ChakraProtoMsg::METADATA_NODE;
  } else if (jt == JType::kGpu) {
    bool decided = false;
    if (contains(n.name, "ncclDevKernel_SendRecv")) {
      uint32_t p = n.has_parent ? find(n.parent) : kNone;
      if (p == kNone) fail_node(n, "ncclDevKernel_SendRecv kernel without a parent CPU op");
      const HostNode& pn = tr_.nodes[p];
      std::string_view keyword = pn.name;
      if (pn.name == "record_param_comms") {
        uint32_t pp = pn.has_parent ? find(pn.parent) : kNone;
        if (pp == kNone) fail_node(n, "record_param_comms parent of a SendRecv kernel has no parent");
        keyword = tr_.nodes[pp].name;
        if (!pn.pg_name.empty()) o.pg_name = pn.pg_name;
      }
      if (contains(keyword, "send")) o.type = ChakraProtoMsg::COMM_SEND_NODE, decided = true;
      else if (contains(keyword, "recv")) o.type = ChakraProtoMsg::COMM_RECV_NODE, decided = true;
      else if (contains(keyword, "nccl:all_to_all")) o.type = ChakraProtoMsg::COMM_COLL_NODE, decided = true;
    }
    if (!decided)
      o.type = (contains(n.name, "ncclKernel") || contains(n.name, "ncclDevKernel")) ? ChakraProtoMsg::COMM_COLL_NODE
                                                                                     : ChakraProtoMsg::COMP_NODE;
    if (o.type == ChakraProtoMsg::COMM_COLL_NODE) {
      o.comm_type = comm_type_of(n.name, !opt_.compat_reference);
      if (o.comm_type < 0) {
        if (opt_.compat_reference)
          fail_node(n,
                    "the name does not correspond to a recognized collective communication type "
                    "(the reference converter aborts here; the default mode keeps the node)");
        warn(in_ + ": node " + std::to_string(n.id) + " '" + std::string(n.name) +
             "': unknown NCCL collective; kept as COMM_COLL_NODE without comm_type");
      }
    }
    if (o.type == ChakraProtoMsg::COMM_COLL_NODE || o.type == ChakraProtoMsg::COMM_SEND_NODE ||
        o.type == ChakraProtoMsg::COMM_RECV_NODE) {
      if (!n.comm_size_ok) {
        if (opt_.compat_reference)
          fail_node(n,
                    "cannot compute comm_size: an input typed Tensor is not a [id, storage, offset, numel, "
                    "elem_bytes, device] tuple");
        warn(in_ + ": node " + std::to_string(n.id) + " '" + std::string(n.name) +
             "': input tensors lack the 6-tuple layout; comm_size written as 0");
        o.comm_size_zero = true;
      }
    }
  }
  out_pos_[i] = uint32_t(outs_.size());
  outs_.push_back(std::move(o));
}

// Default mode: the sync deps that passed the time test become data deps unless one would close
// a cycle (host ids and Kineto times can disagree, e.g. across threads: the reference's issue
// #134). All accepted edges follow one topological order of the graph without them — Kahn's
// algorithm taking the earliest-starting ready node first, so that time order decides where the
// graph leaves a choice — which keeps the result acyclic however many are added.
void Converter::add_sync_deps() {
  if (sync_candidates_.empty()) return;
  const uint32_t n = uint32_t(outs_.size());
  std::vector<uint32_t> pending(n, 0), child_begin(n + 1, 0), child_list;
  auto dep_pos = [&](uint64_t id) {
    const uint32_t h = id > uint64_t(INT64_MAX) ? kNone : find(int64_t(id));
    return h == kNone ? kNone : out_pos_[h];
  };
  for (uint32_t o = 0; o < n; ++o)
    for (uint64_t id : outs_[o].data_deps)
      if (uint32_t p = dep_pos(id); p != kNone) ++pending[o], ++child_begin[p + 1];
  for (uint32_t o = 0; o < n; ++o) child_begin[o + 1] += child_begin[o];
  child_list.resize(child_begin[n]);
  {
    std::vector<uint32_t> fill(child_begin.begin(), child_begin.end() - 1);
    for (uint32_t o = 0; o < n; ++o)
      for (uint64_t id : outs_[o].data_deps)
        if (uint32_t p = dep_pos(id); p != kNone) child_list[fill[p]++] = o;
  }
  auto start = [&](uint32_t o) {
    const HostNode& h = tr_.nodes[outs_[o].src];
    return h.has_ts ? h.ts : -std::numeric_limits<double>::infinity();
  };
  using Ready = std::pair<double, uint32_t>;  // (start, output position): earliest first
  std::priority_queue<Ready, std::vector<Ready>, std::greater<Ready>> ready;
  for (uint32_t o = 0; o < n; ++o)
    if (pending[o] == 0) ready.push({start(o), o});
  std::vector<uint32_t> rank(n, kNone);
  uint32_t next = 0;
  while (!ready.empty()) {
    const uint32_t o = ready.top().second;
    ready.pop();
    rank[o] = next++;
    for (uint32_t k = child_begin[o]; k < child_begin[o + 1]; ++k)
      if (--pending[child_list[k]] == 0) ready.push({start(child_list[k]), child_list[k]});
  }
  if (next < n) return;  // already cyclic: the validator reports that cycle
  for (const auto& [waiter, target] : sync_candidates_) {
    if (rank[target] > rank[waiter]) {
      ++stats_.sync_deps_cyclic;
      continue;
    }
    Out& o = outs_[waiter];
    const int64_t id = tr_.nodes[outs_[target].src].id;
    if (std::find(o.data_deps.begin(), o.data_deps.end(), uint64_t(id)) != o.data_deps.end()) continue;
    o.data_deps.push_back(uint64_t(id));
    ++stats_.sync_deps;
    if (log_.enabled())
      log_.debug("Node ID " + std::to_string(tr_.nodes[o.src].id) +
                 " now has an synchonization dependency on Node ID " +
                 std::to_string(id));  // [sic]: the reference's text
  }
  std::vector<std::pair<uint32_t, uint32_t>>().swap(sync_candidates_);
}

// Default mode: ctrl deps get the same treatment as data deps in metadata_deps.h (ASTRA-sim's
// feeder follows them too): a ctrl dep on a METADATA node moves to that node's own ctrl parent,
// or is dropped when the METADATA node has none.
template <class Alive>
void Converter::reparent_metadata_ctrl(const std::vector<uint32_t>& final_order, const Alive& alive) {
  auto metadata_out = [&](int64_t id) -> const Out* {
    if (!alive(id)) return nullptr;
    const Out& t = outs_[out_pos_[find(id)]];
    return t.type == ChakraProtoMsg::METADATA_NODE ? &t : nullptr;
  };
  for (uint32_t k : final_order) {
    Out& o = outs_[k];
    if (o.type == ChakraProtoMsg::METADATA_NODE || !o.has_ctrl) continue;
    // bounded: a parent cycle among METADATA nodes must not hang (the validator reports cycles)
    for (size_t steps = 0; o.has_ctrl && steps <= outs_.size(); ++steps) {
      const Out* m = metadata_out(o.ctrl);
      if (!m) break;
      if (m->has_ctrl && alive(m->ctrl)) o.ctrl = m->ctrl;
      else o.has_ctrl = false;
    }
  }
}

void Converter::encode_deps() {
  std::vector<uint32_t> epoch(tr_.nodes.size(), 0);
  std::vector<uint32_t> stack;
  uint32_t cur_epoch = 0;
  auto add = [](Out& o, int64_t id) {
    if (std::find(o.data_deps.begin(), o.data_deps.end(), uint64_t(id)) != o.data_deps.end()) return false;
    o.data_deps.push_back(uint64_t(id));
    return true;
  };
  const size_t n_out = outs_.size();
  for (size_t r = 0; r < n_out; ++r) {
    if (!is_thread_root(tr_.nodes[outs_[r].src].name)) continue;
    ++cur_epoch;
    uint32_t last_any = kNone, last_cpu = kNone;
    stack.assign(1, outs_[r].src);
    while (!stack.empty()) {
      uint32_t i = stack.back();
      stack.pop_back();
      if (epoch[i] == cur_epoch) continue;
      epoch[i] = cur_epoch;
      const HostNode& n = tr_.nodes[i];
      Out& o = outs_[out_pos_[i]];
      if (n.is_gpu) {
        if (last_any != kNone) {
          int64_t dep = tr_.nodes[last_any].id;
          if (add(o, dep) && log_.enabled())
            log_.debug("GPU Node ID " + std::to_string(n.id) + " now has a data dependency on Node ID " +
                       std::to_string(dep));
        }
        last_any = last_cpu;
      } else {
        if (n.has_inter_thread_dep && n.inter_thread_dep != 0) {
          if (add(o, n.inter_thread_dep) && log_.enabled())
            log_.debug("CPU Node ID " + std::to_string(n.id) + " now has an inter-thread data dependency on Node ID " +
                       std::to_string(n.inter_thread_dep));
        }
        if (last_cpu != kNone) {
          int64_t dep = tr_.nodes[last_cpu].id;
          if (add(o, dep) && log_.enabled())
            log_.debug("CPU Node ID " + std::to_string(n.id) + " now has a data dependency on non-GPU Node ID " +
                       std::to_string(dep));
        }
        last_cpu = last_any = i;
      }
      // sync_dep (docs/chakra.md §3.5 step 4): the reference adds one only if the dependency's start_time_micros
      // is earlier, but never sets start times, so it adds none. The default mode applies the
      // intended test to the linked `ts`; a dependency that starts later would be a false
      // positive (and could close a cycle).
      // They are added after the walk (add_sync_deps), once the rest of the graph is known.
      if (!opt_.compat_reference)
        for (int64_t s : n.sync_deps) {
          const uint32_t d = find(s);
          if (d == kNone || out_pos_[d] == kNone) ++stats_.sync_deps_missing;
          else if (!(n.has_ts && tr_.nodes[d].has_ts && tr_.nodes[d].ts < n.ts)) ++stats_.sync_deps_not_earlier;
          else sync_candidates_.push_back({out_pos_[i], out_pos_[d]});
        }
      for (uint32_t k = child_begin_[i]; k < child_begin_[i + 1]; ++k) {
        uint32_t c = child_list_[k];
        if (out_pos_[c] != kNone && epoch[c] != cur_epoch) stack.push_back(c);
      }
    }
  }
}

// One attribute of a written node: an int64, bool or string value (the only kinds written).
struct WireAttr {
  enum Kind : uint8_t { kInt, kBool, kStr } kind;
  std::string_view name;
  int64_t i = 0;
  std::string_view s;
  size_t body_size() const {
    size_t v = kind == kInt    ? 1 + wire::varint_size(uint64_t(i))
               : kind == kBool ? 3
                               : wire::len_field_size(wire::tag(29, wire::kLen), s.size());
    return wire::len_field_size(wire::tag(1, wire::kLen), name.size()) + v;
  }
  char* put(char* p) const {
    p = wire::put_bytes(p, wire::tag(1, wire::kLen), name);
    switch (kind) {
      case kInt: return wire::put_varint(wire::put_varint(p, wire::tag(9, wire::kVarint)), uint64_t(i));
      case kBool: return wire::put_varint(wire::put_varint(p, wire::tag(27, wire::kVarint)), i ? 1 : 0);
      case kStr: return wire::put_bytes(p, wire::tag(29, wire::kLen), s);
    }
    return p;
  }
};

size_t io_size(std::string_view v, std::string_view s, std::string_view t) {
  size_t n = 0;
  for (auto x : {v, s, t})
    if (!x.empty()) n += wire::len_field_size(wire::tag(1, wire::kLen), x.size());
  return n;
}

char* put_io(char* p, uint32_t field, size_t size, std::string_view v, std::string_view s, std::string_view t) {
  p = wire::put_len_header(p, wire::tag(field, wire::kLen), size);
  uint32_t f = 1;
  for (auto x : {v, s, t}) {
    if (!x.empty()) p = wire::put_bytes(p, wire::tag(f, wire::kLen), x);
    ++f;
  }
  return p;
}

size_t packed_size(const uint64_t* d, size_t n) {
  size_t s = 0;
  for (size_t k = 0; k < n; ++k) s += wire::varint_size(d[k]);
  return s;
}

char* put_packed(char* p, uint32_t field, const uint64_t* d, size_t n, size_t size) {
  p = wire::put_len_header(p, wire::tag(field, wire::kLen), size);
  for (size_t k = 0; k < n; ++k) p = wire::put_varint(p, d[k]);
  return p;
}

// Appends the node's record (varint32 size + ChakraProtoMsg::Node bytes, exactly as protobuf
// serializes it: fields in number order, proto3 zero/empty scalars omitted, inputs/outputs
// always present, oneof attribute values always written).
void Converter::encode_node(const Out& o, std::string& buf) const {
  using namespace wire;
  const HostNode& n = tr_.nodes[o.src];
  const std::vector<uint64_t>& data = graph_[o.gpos].data_deps;
  const uint64_t ctrl = uint64_t(o.ctrl);
  // reference hack: the optimizer-step annotation covers most of the step, so it gets 0
  const uint64_t dur = uint64_t(n.name.find("Optimizer.step") != std::string_view::npos ? 0 : n.duration);
  // default mode: the linked trace's start (truncated like the durations); the reference never
  // writes one. A negative start cannot be a uint64 and is left out.
  const uint64_t start = !opt_.compat_reference && n.has_ts && n.ts >= 0 ? uint64_t(n.ts) : 0;
  WireAttr attrs[kIntAttrCount + 6];
  size_t na = 0;
  for (int a = 0; a < kIntAttrCount; ++a) attrs[na++] = {WireAttr::kInt, kIntAttrNames[a], n.attr[a], {}};
  attrs[na++] = {WireAttr::kStr, "op_schema", 0, n.op_schema};
  attrs[na++] = {WireAttr::kBool, "is_cpu_op", !n.is_gpu, {}};
  if (!n.stream_null) attrs[na++] = {WireAttr::kInt, "stream", n.stream, {}};
  if (o.type == ChakraProtoMsg::COMM_COLL_NODE && o.comm_type >= 0)
    attrs[na++] = {WireAttr::kInt, "comm_type", o.comm_type, {}};
  if (o.type == ChakraProtoMsg::COMM_COLL_NODE || o.type == ChakraProtoMsg::COMM_SEND_NODE ||
      o.type == ChakraProtoMsg::COMM_RECV_NODE) {
    attrs[na++] = {WireAttr::kInt, "comm_size", o.comm_size_zero ? 0 : n.comm_size, {}};
    if (!o.pg_name.empty()) attrs[na++] = {WireAttr::kStr, "pg_name", 0, o.pg_name};
  }

  const std::string_view name = n.name;
  const size_t ctrl_size = o.has_ctrl ? varint_size(ctrl) : 0;
  const size_t data_size = packed_size(data.data(), data.size());
  const size_t in_size = io_size(n.in_values, n.in_shapes, n.in_types);
  const size_t out_size = io_size(n.out_values, n.out_shapes, n.out_types);
  size_t attr_size[kIntAttrCount + 6];
  size_t size = 0;
  if (n.id != 0) size += 1 + varint_size(uint64_t(n.id));
  if (!name.empty()) size += len_field_size(tag(2, kLen), name.size());
  if (o.type != 0) size += 1 + varint_size(uint64_t(int64_t(o.type)));
  if (o.has_ctrl) size += len_field_size(tag(4, kLen), ctrl_size);
  if (!data.empty()) size += len_field_size(tag(5, kLen), data_size);
  if (start != 0) size += 1 + varint_size(start);
  if (dur != 0) size += 1 + varint_size(dur);
  size += len_field_size(tag(8, kLen), in_size) + len_field_size(tag(9, kLen), out_size);
  for (size_t k = 0; k < na; ++k) {
    attr_size[k] = attrs[k].body_size();
    size += len_field_size(tag(10, kLen), attr_size[k]);
  }

  const size_t head = buf.size();
  buf.resize(head + varint_size(size) + size);
  char* const begin = buf.data() + head;
  char* p = put_varint(begin, size);
  if (n.id != 0) p = put_varint(put_varint(p, tag(1, kVarint)), uint64_t(n.id));
  if (!name.empty()) p = put_bytes(p, tag(2, kLen), name);
  if (o.type != 0) p = put_varint(put_varint(p, tag(3, kVarint)), uint64_t(int64_t(o.type)));
  if (o.has_ctrl) p = put_packed(p, 4, &ctrl, 1, ctrl_size);
  if (!data.empty()) p = put_packed(p, 5, data.data(), data.size(), data_size);
  if (start != 0) p = put_varint(put_varint(p, tag(6, kVarint)), start);
  if (dur != 0) p = put_varint(put_varint(p, tag(7, kVarint)), dur);
  p = put_io(p, 8, in_size, n.in_values, n.in_shapes, n.in_types);
  p = put_io(p, 9, out_size, n.out_values, n.out_shapes, n.out_types);
  for (size_t k = 0; k < na; ++k) p = attrs[k].put(put_len_header(p, tag(10, kLen), attr_size[k]));
  if (p != buf.data() + buf.size())
    throw std::logic_error("chakra node encoder: size mismatch for node " + std::to_string(n.id));
}

void Converter::write(const std::vector<uint32_t>& final_order) {
  if (log_.enabled()) {
    log_.debug("Opening Chakra execution trace file: " + out_path_);
    log_.debug("Writing Chakra execution trace.");
  }
  AtomicOutput out(out_path_);
  EtWriter w(out);
  const EtMetadata& m = tr_.meta;
  {
    if (log_.enabled()) log_.debug("Encoding global metadata for Chakra execution trace.");
    ChakraProtoMsg::GlobalMetadata gm;
    auto* a = gm.add_attr();
    a->set_name("schema");
    a->set_string_val(m.schema);
    a = gm.add_attr();
    a->set_name("pid");
    a->set_uint64_val(m.pid);
    a = gm.add_attr();
    a->set_name("time");
    a->set_string_val(m.time);
    a = gm.add_attr();
    a->set_name("start_ts");
    a->set_uint64_val(m.start_ts);
    a = gm.add_attr();
    a->set_name("finish_ts");
    a->set_uint64_val(m.finish_ts);
    w.write(gm);
  }
  if (log_.enabled()) log_.debug("Encoding and writing nodes for Chakra execution trace.");
  std::vector<uint32_t> by_id(final_order);
  {
    // sort (id, position) pairs: much cheaper than comparing through two indirections
    std::vector<std::pair<int64_t, uint32_t>> keyed(by_id.size());
    for (size_t j = 0; j < by_id.size(); ++j) keyed[j] = {tr_.nodes[outs_[by_id[j]].src].id, by_id[j]};
    if (!std::is_sorted(keyed.begin(), keyed.end())) std::sort(keyed.begin(), keyed.end());
    for (size_t j = 0; j < by_id.size(); ++j) by_id[j] = keyed[j].second;
  }
  // Encoding is now cheap (~0.2 us per node, about as much as the write() of its bytes), so it
  // runs on this thread: handing chunks to worker threads cost more in wake-ups than it saved,
  // especially on a loaded machine. A small buffer keeps peak RSS low.
  constexpr size_t kFlush = 256 << 10;
  std::string buf;
  buf.reserve(kFlush + (64 << 10));
  for (uint32_t k : by_id) {
    encode_node(outs_[k], buf);
    if (buf.size() >= kFlush) {
      out.write(buf);
      buf.clear();
    }
  }
  out.write(buf);
  out.commit();
  if (log_.enabled()) log_.debug("Chakra execution trace writing completed.");
}

// The GlobalMetadata written last needs all five keys with these types: fail before any node work.
void Converter::check_metadata() const {
  const EtMetadata& m = tr_.meta;
  const char* missing = !m.has_schema      ? "schema"
                        : !m.has_pid       ? "pid"
                        : !m.has_time      ? "time"
                        : !m.has_start_ts  ? "start_ts"
                        : !m.has_finish_ts ? "finish_ts"
                                           : nullptr;
  if (missing) throw InputError(in_, "top level", std::string("missing metadata key \"") + missing + "\"");
  if (!m.pid_ok) throw InputError(in_, "\"pid\"", "must be a non-negative integer below 2^64, got " + m.pid_repr);
  if (!m.start_ts_ok)
    throw InputError(in_, "\"start_ts\"", "must be a non-negative integer below 2^64, got " + m.start_ts_repr);
  if (!m.finish_ts_ok)
    throw InputError(in_, "\"finish_ts\"", "must be a non-negative integer below 2^64, got " + m.finish_ts_repr);
  if (!m.time_is_string) throw InputError(in_, "\"time\"", "must be a string, got " + m.time_repr);
}

void Converter::log_metadata() {
  if (!log_.enabled()) return;
  const EtMetadata& m = tr_.meta;
  log_.debug("Extracting and processing node data from execution trace.");
  std::string schema_repr;
  py_repr_string(m.schema, schema_repr);
  log_.debug("Parsed JSON metadata: {'schema': " + schema_repr + ", 'pid': " + m.pid_repr + ", 'time': " + m.time_repr +
             ", 'start_ts': " + m.start_ts_repr + ", 'finish_ts': " + m.finish_ts_repr + "}");
}

void Converter::index_node_ids() {
  const auto& nodes = tr_.nodes;
  size_t dup = 0, first = 0;
  if (!index_.build(
          uint32_t(nodes.size()), [&](size_t i) { return nodes[i].id; }, &dup, &first))
    fail_node(nodes[dup], "duplicate node id (also at byte " + std::to_string(nodes[first].offset) + ")");
}

// CPU / GPU / METADATA, plus the reference log's op counts
void Converter::classify_nodes() {
  const auto& nodes = tr_.nodes;
  const uint32_t n = uint32_t(nodes.size());
  jtype_.resize(n);
  size_t cpu_ops = 0, gpu_ops = 0, rpc_ops = 0, nccl_ops = 0, root_ops = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const HostNode& x = nodes[i];
    jtype_[i] = contains(x.name, "process_group:init") ? JType::kMetadata : x.is_gpu ? JType::kGpu : JType::kCpu;
    cpu_ops += jtype_[i] == JType::kCpu;
    gpu_ops += jtype_[i] == JType::kGpu;
    rpc_ops += contains(x.name, "record_param_comms");
    nccl_ops += contains(x.name, "nccl:");
    root_ops += is_thread_root(x.name);
  }
  if (log_.enabled()) {
    log_.debug("Number of nodes in JSON trace: " + std::to_string(n));
    log_.debug("total_op: " + std::to_string(n));
    log_.debug("cpu_op: " + std::to_string(cpu_ops));
    log_.debug("gpu_op: " + std::to_string(gpu_ops));
    log_.debug("record_param_comms_op: " + std::to_string(rpc_ops));
    log_.debug("nccl_op: " + std::to_string(nccl_ops));
    log_.debug("root_op: " + std::to_string(root_ops));
  }
}

// children (CSR): all children sorted by id descending (DFS push order), GPU children in JSON order
void Converter::build_child_lists() {
  const auto& nodes = tr_.nodes;
  const uint32_t n = uint32_t(nodes.size());
  std::vector<uint32_t> parent_of(n, kNone);
  child_begin_.assign(n + 1, 0);
  gpu_child_begin_.assign(n + 1, 0);
  for (uint32_t i = 0; i < n; ++i) {
    if (!nodes[i].has_parent) continue;
    uint32_t p = find(nodes[i].parent);
    if (p == kNone) continue;
    parent_of[i] = p;
    ++child_begin_[p + 1];
    if (nodes[i].is_gpu) ++gpu_child_begin_[p + 1];
  }
  for (uint32_t i = 0; i < n; ++i) {
    child_begin_[i + 1] += child_begin_[i];
    gpu_child_begin_[i + 1] += gpu_child_begin_[i];
  }
  child_list_.resize(child_begin_[n]);
  gpu_child_list_.resize(gpu_child_begin_[n]);
  {
    std::vector<uint32_t> f1(child_begin_.begin(), child_begin_.end() - 1),
        f2(gpu_child_begin_.begin(), gpu_child_begin_.end() - 1);
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t p = parent_of[i];
      if (p == kNone) continue;
      child_list_[f1[p]++] = i;
      if (nodes[i].is_gpu) gpu_child_list_[f2[p]++] = i;
    }
  }
  for (uint32_t p = 0; p < n; ++p)
    std::stable_sort(child_list_.begin() + child_begin_[p], child_list_.begin() + child_begin_[p + 1],
                     [&](uint32_t a, uint32_t b) { return nodes[a].id > nodes[b].id; });
}

// output map in the reference's insertion order (docs/chakra.md §3.3)
void Converter::build_output_map() {
  const uint32_t n = uint32_t(tr_.nodes.size());
  out_pos_.assign(n, kNone);
  outs_.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    if (jtype_[i] == JType::kGpu) continue;
    convert_node(i);
    for (uint32_t k = gpu_child_begin_[i]; k < gpu_child_begin_[i + 1]; ++k) convert_node(gpu_child_list_[k]);
  }
}

void Converter::warn_skipped_sync_deps() {
  if (const size_t skipped = stats_.sync_deps_missing + stats_.sync_deps_not_earlier + stats_.sync_deps_cyclic)
    warn(in_ + ": " + std::to_string(skipped) + " of " + std::to_string(skipped + stats_.sync_deps) +
         " sync_dep entries not turned into data deps (" + std::to_string(stats_.sync_deps_missing) +
         " name no written node, " + std::to_string(stats_.sync_deps_not_earlier) +
         " do not start before the waiting node, " + std::to_string(stats_.sync_deps_cyclic) + " would close a cycle)");
}

// the JSON tree is no longer needed: give its memory back before the graph view is built
void Converter::release_json_tree() {
  for (auto* v : {&child_begin_, &child_list_, &gpu_child_begin_, &gpu_child_list_}) std::vector<uint32_t>().swap(*v);
  std::vector<JType>().swap(jtype_);
}

// dangling nodes: no data deps and nobody depends on them (docs/chakra.md §3.7)
void Converter::remove_dangling_nodes() {
  const auto& nodes = tr_.nodes;
  // by host index; deps on unknown ids fail validation later
  std::vector<bool> referenced(uint32_t(nodes.size()), false);
  for (const Out& o : outs_)
    for (uint64_t d : o.data_deps) {
      uint32_t i = d > uint64_t(INT64_MAX) ? kNone : find(int64_t(d));
      if (i != kNone) referenced[i] = true;
    }
  std::vector<int64_t> removed;
  for (Out& o : outs_) {
    int64_t id = nodes[o.src].id;
    if (o.data_deps.empty() && !referenced[o.src]) {
      o.removed = true;
      removed.push_back(id);
    }
  }
  stats_.removed_dangling = removed.size();
  if (log_.enabled() && !removed.empty()) {
    log_.debug("Identified and removed " + std::to_string(removed.size()) + " dangling nodes:");
    for (int64_t id : removed) log_.debug(" - Node ID " + std::to_string(id));
  }
}

// output positions of the nodes that are written, map order
std::vector<uint32_t> Converter::written_order() const {
  std::vector<uint32_t> final_order;
  final_order.reserve(outs_.size());
  for (uint32_t k = 0; k < outs_.size(); ++k)
    if (!outs_[k].removed) final_order.push_back(k);
  return final_order;
}

// default-mode fix: no ctrl dep to a node that is not written (the removed process root, typically)
void Converter::drop_ctrl_to_unwritten(const std::vector<uint32_t>& final_order) {
  for (uint32_t k : final_order) {
    Out& o = outs_[k];
    if (o.has_ctrl && !is_written(o.ctrl)) o.has_ctrl = false;
  }
}

void Converter::check_dep_ids() const {
  for (const Out& o : outs_)
    for (uint64_t d : o.data_deps)
      if (int64_t(d) < 0) fail_node(tr_.nodes[o.src], "negative dependency id " + std::to_string(int64_t(d)));
}

// the written nodes as the validator and the simulator see them; graph_ takes over the data deps
void Converter::build_graph_view(const std::vector<uint32_t>& final_order) {
  const auto& nodes = tr_.nodes;
  std::vector<EtNode>& graph = graph_;
  graph.resize(final_order.size());
  for (size_t j = 0; j < final_order.size(); ++j) {
    Out& o = outs_[final_order[j]];
    o.gpos = uint32_t(j);
    const HostNode& x = nodes[o.src];
    EtNode& g = graph[j];
    g.id = uint64_t(x.id);
    g.name = x.name;
    g.data_deps = std::move(o.data_deps);
    // ctrl_deps stay empty here (one 32-byte allocation per node): the only ctrl dep a node has
    // is to a written node in the default mode (see drop_ctrl_to_unwritten), and the validator's
    // ctrl check is a warning, which the converter ignores, in compat mode. The writer uses o.ctrl.
    g.duration = uint64_t(x.name.find("Optimizer.step") != std::string_view::npos ? 0 : x.duration);
    g.is_cpu = !x.is_gpu;
    g.has_stream = !x.stream_null;
    g.stream = x.stream;
    g.has_tid = true;
    g.tid = x.attr[kTid];
  }
}

// default mode: data deps on METADATA nodes move to their parents (metadata_deps.h)
void Converter::bypass_metadata(const std::vector<uint32_t>& final_order) {
  std::vector<bool> is_metadata(graph_.size());
  for (size_t j = 0; j < final_order.size(); ++j)
    is_metadata[j] = outs_[final_order[j]].type == ChakraProtoMsg::METADATA_NODE;
  stats_.metadata_bypassed = bypass_metadata_data_deps(graph_, is_metadata);
}

// the first error stops the conversion before anything is written
void Converter::validate() {
  ValidateOptions vo;
  vo.ctrl_dangling_is_error = !opt_.compat_reference;
  for (const Issue& is : validate_graph(graph_, vo)) {
    if (!is.error) continue;
    if (log_.enabled()) log_.line_error(is.where + ": " + is.problem);
    throw InputError(in_, is.where, is.problem);
  }
}

void Converter::run_simulation() {
  if (log_.enabled()) log_.debug("Simulating execution of Chakra nodes based on data dependencies.");
  simulate(graph_, [&](const std::string& line) {
    if (log_.enabled()) log_.debug(line);
    else if (opt_.sim_line) opt_.sim_line(line);
    else std::printf("%s\n", line.c_str());
  });
}

ConvertStats Converter::run() {
  if (log_.enabled()) log_.debug("Loading Chakra host + device execution traces in JSON format from file: " + in_);
  ReadOptions ro;
  ro.compat_reference = opt_.compat_reference;
  ro.parser_threads = opt_.parser_threads;
  PhaseTimer timer;
  tr_ = read_host_et(in_, ro);
#ifdef __GLIBC__
  // The parser threads' batches were freed into their malloc arenas, which this thread does not
  // allocate from: hand those pages back now, or the graph built below adds to them (-3 MB peak).
  malloc_trim(0);
#endif
  timer.mark("read");
  check_metadata();
  stats_.json_nodes = uint32_t(tr_.nodes.size());
  log_metadata();
  index_node_ids();
  classify_nodes();
  build_child_lists();
  build_output_map();
  timer.mark("structure");
  encode_deps();
  add_sync_deps();
  timer.mark("deps");
  warn_skipped_sync_deps();
  release_json_tree();

  remove_dangling_nodes();
  const std::vector<uint32_t> final_order = written_order();
  if (!opt_.compat_reference) drop_ctrl_to_unwritten(final_order);
  if (!opt_.compat_reference) reparent_metadata_ctrl(final_order, [this](int64_t id) { return is_written(id); });

  // validate before writing; the same graph view feeds the simulator
  check_dep_ids();
  build_graph_view(final_order);
  if (!opt_.compat_reference) bypass_metadata(final_order);
  validate();
  timer.mark("validate");
  write(final_order);
  timer.mark("write");
  stats_.written_nodes = final_order.size();
  if (opt_.simulate) run_simulation();
  if (log_.enabled()) log_.info("Conversion successful. Output file is available at " + out_path_ + ".");
  return stats_;
}

}  // namespace

ConvertStats convert(const std::string& in_path, const std::string& out_path, const ConvertOptions& opt) {
  Converter c(in_path, out_path, opt);
  return c.run();
}

}  // namespace opf::chakra
