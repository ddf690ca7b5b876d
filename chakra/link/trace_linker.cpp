#include "trace_linker.h"

#include <simdjson.h>

#include <algorithm>
#include <exception>
#include <thread>
#include <unordered_map>

#include "atomic_output.h"
#include "common/json_escape.h"
#include "host_et_index.h"
#include "input_error.h"
#include "kineto_links.h"
#include "kineto_trace.h"
#include "py_json.h"

namespace opf::chakra {

namespace dom = simdjson::dom;

namespace {

using linker::CpuLink;
using linker::kNone;
using linker::num_text;
using linker::OpsByThread;

// The node's fields in output order, as Python's dict would hold them after the linker's updates.
struct Field {
  std::string_view key;
  bool original = true;
  dom::element value;
  std::string text;  // Python-json text of an updated value
};

void set_field(std::vector<Field>& fields, std::string_view key, std::string text) {
  for (auto& f : fields)
    if (f.key == key) {
      f.original = false;
      f.text = std::move(text);
      return;
    }
  Field f;
  f.key = key;
  f.original = false;
  f.text = std::move(text);
  fields.push_back(std::move(f));
}

bool has_field(const std::vector<Field>& fields, std::string_view key) {
  for (auto& f : fields)
    if (f.key == key) return true;
  return false;
}

// pretty: json.dump(indent=4) layout (the reference's); otherwise one node per line in
// json.dumps' compact layout, a quarter of the bytes.
void emit_node(const std::vector<Field>& fields, bool pretty, std::string& out) {
  if (pretty) py_json_indent(2, out);
  else out.push_back('\n');
  out.push_back('{');
  bool first = true;
  for (auto& f : fields) {
    if (!first) out += pretty ? "," : ", ";
    first = false;
    if (pretty) py_json_indent(3, out);
    opf::json::append_quoted(out, f.key, opf::json::Escape::python_ascii);
    out += ": ";
    if (!f.original) out += f.text;
    else if (pretty) py_json_element(f.value, 3, out);
    else py_json_element_compact(f.value, out);
  }
  if (pretty) py_json_indent(2, out);
  out.push_back('}');
}

std::string int_list_text(const std::vector<int64_t>& v, bool pretty) {
  if (v.empty()) return "[]";
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += pretty ? "," : ", ";
    if (pretty) py_json_indent(4, s);
    s += std::to_string(v[i]);
  }
  if (pretty) py_json_indent(3, s);
  s.push_back(']');
  return s;
}

// Both inputs are independent, so they are read in parallel.
void read_inputs(const LinkOptions& opt, HostEtIndex& host, KinetoTrace& kt) {
  std::exception_ptr host_error;
  std::thread host_reader([&] {
    try {
      host = index_host_et(opt.host_path);
    } catch (...) {
      host_error = std::current_exception();
    }
  });
  try {
    kt = read_kineto_trace(opt.kineto_path);
  } catch (...) {
    host_reader.join();  // the Kineto error wins: report one problem, deterministically
    throw;
  }
  host_reader.join();
  if (host_error) std::rethrow_exception(host_error);
}

// How a host node finds its Kineto CPU op, decided from the Kineto side.
struct OpKeys {
  bool use_rf = false;
  std::unordered_map<int64_t, int64_t> offset_of_tid;  // External-id mode: host tid -> offset
  std::vector<CpuLink> cl;                             // per Kineto CPU op
  std::unordered_map<int64_t, uint32_t> by_key;        // key -> Kineto CPU op
};

OpKeys choose_match_keys(const KinetoTrace& kt, const HostEtIndex& host, bool compat, LinkStats& st) {
  OpKeys keys;
  keys.use_rf = linker::uses_record_function_id(kt, compat);
  // External-id mode: per host thread, External id = rf_id + offset (older PyTorch numbers the
  // ops of each thread from its own base). The offset is voted by ops with rare names, then
  // the best few candidates are scored by how many names agree.
  if (!keys.use_rf) keys.offset_of_tid = linker::detect_external_id_offsets(kt, host, st);
  st.match_key = keys.use_rf ? "Record function id" : "External id";
  keys.cl = linker::assign_match_keys(kt, keys.use_rf);
  keys.by_key = linker::index_ops_by_key(keys.cl, compat, keys.use_rf);
  return keys;
}

std::unordered_map<int64_t, uint32_t> index_nodes_by_id(const HostEtIndex& host) {
  std::unordered_map<int64_t, uint32_t> node_by_id;
  node_by_id.reserve(host.nodes.size() * 2);
  for (uint32_t i = 0; i < host.nodes.size(); ++i) node_by_id.emplace(host.nodes[i].id, i);
  return node_by_id;
}

// Host nodes are matched, numbered and written in id order.
std::vector<uint32_t> order_by_id(const HostEtIndex& host) {
  const size_t nhost = host.nodes.size();
  std::vector<uint32_t> order(nhost);
  for (uint32_t i = 0; i < nhost; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return host.nodes[a].id < host.nodes[b].id; });
  return order;
}

// Compat: only the subtree of node id 1 (the process root) is linked by the reference. Each walk
// up the parents stops at a node already decided, so every node is walked once.
std::vector<uint8_t> eligible_nodes(const HostEtIndex& host, const std::unordered_map<int64_t, uint32_t>& node_by_id,
                                    bool compat) {
  const size_t nhost = host.nodes.size();
  std::vector<uint8_t> eligible(nhost, 1);
  if (!compat) return eligible;
  std::vector<uint8_t> state(nhost, 0);  // 0 unknown, 1 under root, 2 not, 3 on the current walk
  std::vector<uint32_t> path;
  for (uint32_t s = 0; s < nhost; ++s) {
    path.clear();
    uint32_t cur = s;
    uint8_t verdict = 2;
    for (;;) {
      if (state[cur] == 1 || state[cur] == 2) {
        verdict = state[cur];
        break;
      }
      if (state[cur] == 3) break;  // parent cycle
      const auto& n = host.nodes[cur];
      if (n.id == 1) {
        verdict = 1;
        path.push_back(cur);
        break;
      }
      if (n.parent_kind != ParentKind::integer || n.flat_schema != host.nodes[s].flat_schema) {
        path.push_back(cur);
        break;
      }
      auto it = node_by_id.find(n.parent);
      if (it == node_by_id.end() || it->second == cur) {
        path.push_back(cur);
        break;
      }
      state[cur] = 3;
      path.push_back(cur);
      cur = it->second;
    }
    for (uint32_t p : path) state[p] = verdict;
  }
  for (uint32_t i = 0; i < nhost; ++i) eligible[i] = state[i] == 1;
  return eligible;
}

struct HostMatch {
  std::vector<int32_t> match;     // host node -> Kineto CPU op
  std::vector<int32_t> itd_node;  // host node -> host node it waits on
  std::vector<int32_t> cpu_host;  // Kineto CPU op -> host node
};

// In host id order, so a node's inter-thread dependency resolves only to a node matched before it.
HostMatch match_host_nodes(const HostEtIndex& host, const KinetoTrace& kt, const std::vector<uint32_t>& order,
                           const std::vector<uint8_t>& eligible, const OpKeys& keys, LinkStats& st) {
  const size_t nhost = host.nodes.size();
  HostMatch hm;
  hm.match.assign(nhost, kNone);
  hm.itd_node.assign(nhost, kNone);
  hm.cpu_host.assign(kt.cpu.size(), kNone);
  for (uint32_t r = 0; r < nhost; ++r) {
    const uint32_t h = order[r];
    const auto& n = host.nodes[h];
    if (!eligible[h] || !n.has_rf_id) continue;
    ++st.candidates;
    int64_t key = n.rf_id;
    if (!keys.use_rf) {
      auto oit = keys.offset_of_tid.find(n.tid);
      key += oit == keys.offset_of_tid.end() ? 0 : oit->second;
    }
    auto it = keys.by_key.find(key);
    if (it == keys.by_key.end()) continue;
    const uint32_t k = it->second;
    // a guessed offset is only trusted where the op names agree
    if (!keys.use_rf && kt.cpu[k].name != n.name) {
      ++st.matched_name_mismatch;
      continue;
    }
    hm.cpu_host[k] = int32_t(h);
    hm.match[h] = int32_t(k);
    ++st.matched;
    if (keys.use_rf && kt.cpu[k].name != n.name) ++st.matched_name_mismatch;
    if (keys.cl[k].has_itd) {
      auto dit = keys.by_key.find(keys.cl[k].itd_key);
      if (dit != keys.by_key.end() && hm.cpu_host[dit->second] != kNone) hm.itd_node[h] = hm.cpu_host[dit->second];
    }
  }
  return hm;
}

// The GPU ops a host node owns: those launched from its matched Kineto op's External id.
struct GpuOwners {
  const KinetoTrace& kt;
  const std::vector<int32_t>& match;
  const std::unordered_map<int64_t, std::vector<uint32_t>>& gpu_by_parent_ext;

  const std::vector<uint32_t>* of(uint32_t h) const {
    if (match[h] == kNone) return nullptr;
    auto it = gpu_by_parent_ext.find(kt.cpu[size_t(match[h])].external_id);
    return it == gpu_by_parent_ext.end() ? nullptr : &it->second;
  }
};

// Host nodes in id order, each followed by its GPU copies; `next_id` is the first id left.
std::vector<int64_t> assign_new_ids(const std::vector<uint32_t>& order, const GpuOwners& gpu, int64_t& next_id) {
  std::vector<int64_t> new_id(order.size());
  next_id = 0;
  for (uint32_t r = 0; r < order.size(); ++r) {
    const uint32_t h = order[r];
    new_id[h] = next_id++;
    if (auto* g = gpu.of(h)) next_id += int64_t(g->size());
  }
  return new_id;
}

// kKeep = leave the parent field as it is, kNull = null.
constexpr int64_t kKeep = INT64_MIN, kNull = INT64_MIN + 1;

// Parent values, decided up front in output order (the reference mints fresh ids for parents
// that are not nodes in that order).
std::vector<int64_t> decide_parent_values(const HostEtIndex& host, const std::vector<uint32_t>& order,
                                          const std::unordered_map<int64_t, uint32_t>& node_by_id,
                                          const std::vector<int64_t>& new_id, bool compat, int64_t& next_id) {
  std::vector<int64_t> parent_out(host.nodes.size(), kKeep);
  std::unordered_map<int64_t, int64_t> minted;
  int64_t null_minted = -1;
  for (uint32_t r = 0; r < order.size(); ++r) {
    const uint32_t h = order[r];
    const auto& n = host.nodes[h];
    if (compat && n.flat_schema) continue;  // the reference rewrites "ctrl_deps" only
    if (n.parent_kind == ParentKind::integer) {
      auto it = node_by_id.find(n.parent);
      if (it != node_by_id.end()) {
        parent_out[h] = new_id[it->second];
      } else if (!compat) {
        parent_out[h] = kNull;
      } else {
        auto [mit, fresh] = minted.emplace(n.parent, next_id);
        if (fresh) ++next_id;
        parent_out[h] = mit->second;
      }
    } else if (n.parent_kind == ParentKind::null) {
      // the reference's assign_or_retrieve_id(None) mints one id for all of them
      if (compat) {
        if (null_minted < 0) null_minted = next_id++;
        parent_out[h] = null_minted;
      } else {
        parent_out[h] = kNull;
      }
    }
  }
  return parent_out;
}

using SyncMap = std::vector<std::pair<int64_t, std::vector<int64_t>>>;  // insertion-ordered

// sync_dep placement: target node new id -> GPU copy ids (computed while emitting GPU copies,
// which precede every node they can target only in compat's lookup order; so gather first)
SyncMap gather_sync_deps(const HostEtIndex& host, const std::vector<uint32_t>& order, const GpuOwners& gpu,
                         const std::unordered_map<uint32_t, std::vector<uint32_t>>& gpu_sync, const HostMatch& hm,
                         const std::vector<int64_t>& new_id, bool compat) {
  SyncMap sync_map;
  if (gpu_sync.empty()) return sync_map;
  std::vector<uint32_t> rank_of(order.size());
  for (uint32_t r = 0; r < order.size(); ++r) rank_of[order[r]] = r;
  for (uint32_t r = 0; r < order.size(); ++r) {
    const uint32_t h = order[r];
    auto* g = gpu.of(h);
    if (!g) continue;
    int64_t gid = new_id[h];
    for (uint32_t gi : *g) {
      ++gid;
      auto sit = gpu_sync.find(gi);
      if (sit == gpu_sync.end()) continue;
      std::vector<int64_t> to;
      for (uint32_t c : sit->second) {
        if (hm.cpu_host[c] == kNone) continue;
        const uint32_t th = uint32_t(hm.cpu_host[c]);
        // reference: lookup_new_id() at this point knows only nodes up to this one
        int64_t v = (!compat || rank_of[th] <= r) ? new_id[th] : host.nodes[th].id;
        if (std::find(to.begin(), to.end(), v) == to.end()) to.push_back(v);
      }
      for (int64_t k : to) {
        auto mit = std::find_if(sync_map.begin(), sync_map.end(), [&](auto& p) { return p.first == k; });
        if (mit == sync_map.end()) sync_map.push_back({k, {}}), mit = sync_map.end() - 1;
        mit->second.push_back(gid);
      }
    }
  }
  return sync_map;
}

// Node new id -> its sync_dep list (pointing into `sync_map`).
std::unordered_map<int64_t, const std::vector<int64_t>*> sync_deps_by_node(
    const SyncMap& sync_map, const std::unordered_map<int64_t, uint32_t>& node_by_id,
    const std::vector<int64_t>& new_id, bool compat) {
  std::unordered_map<int64_t, const std::vector<int64_t>*> sync_on;
  for (auto& [k, lst] : sync_map) {
    int64_t target = k;
    if (compat) {  // the reference looks the (already new) id up again as an original id
      auto it = node_by_id.find(k);
      target = it != node_by_id.end() ? new_id[it->second] : k;
    }
    sync_on[target] = &lst;
  }
  return sync_on;
}

// Everything the writer needs, decided before the first byte is written.
struct WriteContext {
  const LinkOptions& opt;
  bool compat, pretty;
  const HostEtIndex& host;
  const KinetoTrace& kt;
  const std::vector<uint32_t>& order;
  const HostMatch& hm;
  const GpuOwners& gpu;
  const std::vector<int64_t>& new_id;
  const std::vector<int64_t>& parent_out;
  const std::unordered_map<int64_t, const std::vector<int64_t>*>& sync_on;
};

struct BlockStats {
  size_t inter_thread = 0, sync_nodes = 0, gpu = 0, nodes = 0;
};
struct Worker {
  dom::parser parser;
  std::vector<Field> fields, gfields, g;
  std::string out;
  BlockStats stats;
  std::exception_ptr error;
};

// The node being written: its position in output order, its index and its parent field's key.
struct NodeSlot {
  uint32_t r, h;
  std::string_view parent_key;
};

// Python keeps a duplicated key's first position and last value.
void load_node_fields(const WriteContext& c, const HostNodeIndex& n, Worker& w) {
  dom::element el;
  if (auto e = w.parser.parse(c.host.text.data() + n.begin, n.length, false).get(el))
    throw InputError(c.opt.host_path, "node id " + std::to_string(n.id), simdjson::error_message(e));
  auto& fields = w.fields;
  fields.clear();
  for (auto f : dom::object(el)) {
    bool dup = false;
    for (auto& x : fields)
      if (x.key == f.key) {
        x.value = f.value;
        dup = true;
      }
    if (!dup) fields.push_back(Field{f.key, true, f.value, {}});
  }
}

void set_kineto_timing(const WriteContext& c, uint32_t h, Worker& w) {
  const int32_t k = c.hm.match[h];
  if (k == kNone) return;
  auto& fields = w.fields;
  const auto& op = c.kt.cpu[size_t(k)];
  set_field(fields, "inclusive_dur", num_text(op.dur));
  set_field(fields, "exclusive_dur", num_text(op.exclusive));
  set_field(fields, "ts", num_text(op.ts));
  if (c.hm.itd_node[h] != kNone) {
    set_field(fields, "inter_thread_dep", std::to_string(c.new_id[size_t(c.hm.itd_node[h])]));
    ++w.stats.inter_thread;
  } else {
    set_field(fields, "inter_thread_dep", "null");
  }
}

void set_gpu_copy_fields(std::vector<Field>& g, const KinetoGpuOp& gop, int64_t gid, std::string_view parent_key) {
  set_field(g, "id", std::to_string(gid));
  set_field(g, parent_key, "0");  // set by finish_node(); here it keeps the key's position
  std::string t;
  opf::json::append_quoted(t, gop.cat, opf::json::Escape::python_ascii);
  set_field(g, "cat", t);
  t.clear();
  opf::json::append_quoted(t, gop.name, opf::json::Escape::python_ascii);
  set_field(g, "name", t);
  set_field(g, "ph", std::string(gop.ph_json));
  set_field(g, "inclusive_dur", num_text(gop.dur));
  set_field(g, "exclusive_dur", num_text(gop.dur));
  set_field(g, "ts", num_text(gop.ts));
  set_field(g, "stream", std::string(gop.stream_json));
  if (!gop.pg_name_json.empty() && gop.name.find("ncclDevKernel") != std::string_view::npos)
    set_field(g, "pg_name", std::string(gop.pg_name_json));
}

// The fields every written node gets last (sync_dep, parent), then the node itself.
void finish_node(const WriteContext& c, const NodeSlot& s, std::vector<Field>& fs, int64_t id, bool host_node,
                 Worker& w) {
  auto sit = c.sync_on.find(id);
  if (sit != c.sync_on.end()) {
    set_field(fs, "sync_dep", int_list_text(*sit->second, c.pretty));
    ++w.stats.sync_nodes;
  }
  const int64_t parent = c.parent_out[s.h];
  if (!host_node) {
    set_field(fs, s.parent_key, std::to_string(c.new_id[s.h]));
  } else if (parent != kKeep && has_field(fs, s.parent_key)) {
    set_field(fs, s.parent_key, parent == kNull ? std::string("null") : std::to_string(parent));
  }
  if (s.r != 0 || !host_node) w.out.push_back(',');
  emit_node(fs, c.pretty, w.out);
  ++w.stats.nodes;
}

// The host node in output position r, then its GPU copies.
void emit_rank(const WriteContext& c, uint32_t r, Worker& w) {
  const uint32_t h = c.order[r];
  const auto& n = c.host.nodes[h];
  const NodeSlot s{r, h, (!c.compat && n.flat_schema) ? "parent" : "ctrl_deps"};
  load_node_fields(c, n, w);
  set_field(w.fields, "id", std::to_string(c.new_id[h]));
  set_kineto_timing(c, h, w);
  const auto* glist = c.gpu.of(h);
  if (glist) w.gfields = w.fields;  // the GPU copies start from the updated CPU node
  finish_node(c, s, w.fields, c.new_id[h], true, w);
  if (!glist) return;
  int64_t gid = c.new_id[h];
  for (uint32_t gi : *glist) {
    auto& g = w.g;
    g = w.gfields;
    ++gid;
    set_gpu_copy_fields(g, c.kt.gpu[gi], gid, s.parent_key);
    ++w.stats.gpu;
    finish_node(c, s, g, gid, false, w);
  }
}

// Nodes are formatted in blocks by worker threads, written in order.
void write_node_blocks(const WriteContext& c, AtomicOutput& out, std::vector<Worker>& workers) {
  const size_t nhost = c.host.nodes.size();
  const unsigned nthreads = unsigned(workers.size());
  constexpr uint32_t kBlock = 2048;  // host nodes per block
  for (uint32_t r0 = 0; r0 < nhost; r0 += kBlock * nthreads) {
    auto work = [&](unsigned t) {
      Worker& w = workers[t];
      w.out.clear();
      const uint32_t b = r0 + t * kBlock, e = std::min<uint32_t>(uint32_t(nhost), b + kBlock);
      try {
        for (uint32_t r = b; r < e; ++r) emit_rank(c, r, w);
      } catch (...) {
        w.error = std::current_exception();
      }
    };
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < nthreads && r0 + t * kBlock < nhost; ++t) pool.emplace_back(work, t);
    work(0);
    for (auto& th : pool) th.join();
    for (auto& w : workers)
      if (w.error) std::rethrow_exception(w.error);
    for (unsigned t = 0; t < nthreads && r0 + t * kBlock < nhost; ++t) out.write(workers[t].out);
  }
}

// A top-level value other than "nodes", re-serialised as Python's json would.
void append_top_level_value(const WriteContext& c, const std::string& key, std::string_view raw, dom::parser& parser,
                            std::string& buf) {
  dom::element v;
  if (auto e = parser.parse(raw.data(), raw.size(), false).get(v))
    throw InputError(c.opt.host_path, "\"" + key + "\"", std::string("invalid JSON: ") + simdjson::error_message(e));
  if (c.pretty) py_json_element(v, 1, buf);
  else py_json_element_compact(v, buf);
}

// Writes the output in the host file's top-level key order; returns the workers for their stats.
std::vector<Worker> write_linked_trace(const WriteContext& c) {
  const bool pretty = c.pretty;
  AtomicOutput out(c.opt.output_path);
  std::string buf;
  dom::parser parser;
  buf.push_back('{');
  bool first_top = true;
  const unsigned nthreads = std::max(1u, std::min(4u, std::thread::hardware_concurrency()));
  std::vector<Worker> workers(nthreads);
  for (auto& [key, raw] : c.host.top_level) {
    if (!first_top) buf += pretty ? "," : ", ";
    first_top = false;
    if (pretty) py_json_indent(1, buf);
    opf::json::append_quoted(buf, key, opf::json::Escape::python_ascii);
    buf += ": ";
    if (key != "nodes") {
      append_top_level_value(c, key, raw, parser, buf);
      continue;
    }
    if (c.host.nodes.empty()) {
      buf += "[]";
      continue;
    }
    buf.push_back('[');
    out.write(buf);
    buf.clear();
    write_node_blocks(c, out, workers);
    if (pretty) py_json_indent(1, buf);
    else buf.push_back('\n');
    buf.push_back(']');
  }
  if (pretty && !c.host.top_level.empty()) py_json_indent(0, buf);
  buf.push_back('}');
  if (!pretty) buf.push_back('\n');
  out.write(buf);
  out.commit();
  return workers;
}

}  // namespace

// The MLCommons linker's phases: load both traces, exclusive durations and matching keys on the
// Kineto side, GPU ops to their launching CPU ops, inter-thread and sync dependencies, host
// nodes to Kineto ops, new ids and parents, then write host nodes with their GPU copies.
LinkStats link_traces(const LinkOptions& opt) {
  LinkStats st;
  const bool compat = opt.compat_reference;
  const bool pretty = compat || opt.pretty;

  HostEtIndex host;
  KinetoTrace kt;
  read_inputs(opt, host, kt);

  st.kineto_cpu_ops = kt.cpu.size();
  st.kineto_launches = kt.launches.size();
  st.kineto_gpu_ops = kt.gpu.size();
  const OpsByThread by_tid = linker::group_cpu_ops_by_thread(kt);
  linker::assign_exclusive_durations(kt, by_tid, compat, opt.kineto_path);

  st.host_nodes = host.nodes.size();
  OpKeys keys = choose_match_keys(kt, host, compat, st);
  const auto gpu_by_parent_ext = linker::parent_gpu_ops_to_cpu_ops(kt, st);
  linker::link_inter_thread_deps(kt, by_tid, keys.cl);
  const auto gpu_sync = linker::find_sync_deps(kt, by_tid);

  const auto node_by_id = index_nodes_by_id(host);
  const auto order = order_by_id(host);
  const HostMatch hm = match_host_nodes(host, kt, order, eligible_nodes(host, node_by_id, compat), keys, st);
  const GpuOwners gpu{kt, hm.match, gpu_by_parent_ext};

  int64_t next_id = 0;
  const auto new_id = assign_new_ids(order, gpu, next_id);
  const auto parent_out = decide_parent_values(host, order, node_by_id, new_id, compat, next_id);
  const SyncMap sync_map = gather_sync_deps(host, order, gpu, gpu_sync, hm, new_id, compat);
  const auto sync_on = sync_deps_by_node(sync_map, node_by_id, new_id, compat);

  const WriteContext ctx{opt, compat, pretty, host, kt, order, hm, gpu, new_id, parent_out, sync_on};
  for (auto& w : write_linked_trace(ctx)) {
    st.inter_thread_deps += w.stats.inter_thread;
    st.sync_dep_nodes += w.stats.sync_nodes;
    st.gpu_nodes_emitted += w.stats.gpu;
    st.output_nodes += w.stats.nodes;
  }
  return st;
}

}  // namespace opf::chakra
