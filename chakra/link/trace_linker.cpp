#include "trace_linker.h"

#include <simdjson.h>

#include <algorithm>
#include <cctype>
#include <exception>
#include <thread>
#include <unordered_map>

#include "atomic_output.h"
#include "exclusive_time.h"
#include "host_et_index.h"
#include "input_error.h"
#include "kineto_trace.h"
#include "py_json.h"

namespace opf::chakra {

namespace dom = simdjson::dom;

namespace {

constexpr int32_t kNone = -1;

struct PairHash {
  size_t operator()(const std::pair<uint32_t, int64_t>& p) const {
    return std::hash<int64_t>()(p.second * 1000003 + int64_t(p.first));
  }
};

bool contains_nccl_ci(std::string_view s) {
  for (size_t i = 0; i + 4 <= s.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) == 'n' &&
        std::tolower(static_cast<unsigned char>(s[i + 1])) == 'c' &&
        std::tolower(static_cast<unsigned char>(s[i + 2])) == 'c' &&
        std::tolower(static_cast<unsigned char>(s[i + 3])) == 'l')
      return true;
  return false;
}

std::string num_text(const PyNum& n) {
  std::string s;
  py_json_num(n, s);
  return s;
}

// Matching facts per Kineto CPU op.
struct CpuLink {
  int32_t host = kNone;  // host node (index) linked to this Kineto op, last one wins
  bool has_key = false;  // the op carries a matching key (rf_id or External id - offset)
  int64_t key = 0;
  bool has_itd = false;  // inter-thread dependency (key of the op in another thread)
  int64_t itd_key = 0;
};

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
    py_json_string(f.key, out);
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

}  // namespace

LinkStats link_traces(const LinkOptions& opt) {
  LinkStats st;
  const bool compat = opt.compat_reference;
  const bool pretty = compat || opt.pretty;

  // ---- read both inputs (in parallel: they are independent) ---------------------------------
  HostEtIndex host;
  std::exception_ptr host_error;
  std::thread host_reader([&] {
    try {
      host = index_host_et(opt.host_path);
    } catch (...) {
      host_error = std::current_exception();
    }
  });
  KinetoTrace kt;
  try {
    kt = read_kineto_trace(opt.kineto_path);
  } catch (...) {
    host_reader.join();  // the Kineto error wins: report one problem, deterministically
    throw;
  }
  host_reader.join();
  if (host_error) std::rethrow_exception(host_error);

  // ---- Kineto side -------------------------------------------------------------------------
  const size_t ncpu = kt.cpu.size();
  st.kineto_cpu_ops = ncpu;
  st.kineto_launches = kt.launches.size();
  st.kineto_gpu_ops = kt.gpu.size();

  // per-tid CPU op positions (in ts order), tids in order of first CPU op (dict insertion order)
  std::vector<int32_t> tid_slot(kt.tids.size(), kNone);
  std::vector<std::vector<uint32_t>> by_tid;
  for (uint32_t i = 0; i < ncpu; ++i) {
    auto& slot = tid_slot[kt.cpu[i].tid];
    if (slot == kNone) {
      slot = int32_t(by_tid.size());
      by_tid.emplace_back();
    }
    by_tid[size_t(slot)].push_back(i);
  }
  for (auto& ops : by_tid) {
    std::vector<TimedOp> timed(ops.size());
    for (size_t k = 0; k < ops.size(); ++k) timed[k] = {kt.cpu[ops[k]].ts, kt.cpu[ops[k]].dur, kt.cpu[ops[k]].event};
    int64_t neg = -1;
    auto excl = compute_exclusive(timed, compat ? TieOrder::reference : TieOrder::parent_first, neg);
    if (neg >= 0) {
      const auto& op = kt.cpu[ops[size_t(neg)]];
      throw InputError(opt.kineto_path, "event #" + std::to_string(op.event),
                       "exclusive duration of '" + std::string(op.name) + "' (ts " + num_text(op.ts) + ", dur " +
                           num_text(op.dur) +
                           ") is below zero: the merged lengths of the ops inside it exceed its duration "
                           "(float rounding); the reference aborts here too");
    }
    for (size_t k = 0; k < ops.size(); ++k) kt.cpu[ops[k]].exclusive = excl[k];
  }

  // ---- host side ----------------------------------------------------------------------------
  const size_t nhost = host.nodes.size();
  st.host_nodes = nhost;

  std::vector<CpuLink> cl(ncpu);
  bool use_rf = compat;
  if (!compat)
    for (auto& op : kt.cpu)
      if (op.has_rf_id && op.rf_id != 0) {
        use_rf = true;
        break;
      }
  // External-id mode: per host thread, External id = rf_id + offset (older PyTorch numbers the
  // ops of each thread from its own base). The offset is voted by ops with rare names, then
  // the best few candidates are scored by how many names agree.
  std::unordered_map<int64_t, int64_t> offset_of_tid;
  if (!use_rf) {
    std::unordered_map<int64_t, uint32_t> by_ext;
    by_ext.reserve(ncpu * 2);
    std::unordered_map<std::string_view, std::vector<int64_t>> exts_of_name;
    for (uint32_t i = 0; i < ncpu; ++i)
      if (kt.cpu[i].external_id != kNoExternalId) {
        by_ext[kt.cpu[i].external_id] = i;
        exts_of_name[kt.cpu[i].name].push_back(kt.cpu[i].external_id);
      }
    std::unordered_map<int64_t, std::vector<uint32_t>> host_by_tid;
    for (uint32_t i = 0; i < nhost; ++i)
      if (host.nodes[i].has_rf_id) host_by_tid[host.nodes[i].tid].push_back(i);
    for (auto& [tid, members] : host_by_tid) {
      std::vector<std::pair<size_t, uint32_t>> rare;  // (occurrences in Kineto, host node)
      for (uint32_t i : members) {
        auto it = exts_of_name.find(host.nodes[i].name);
        if (it != exts_of_name.end()) rare.emplace_back(it->second.size(), i);
      }
      std::sort(rare.begin(), rare.end());
      std::unordered_map<int64_t, size_t> votes;
      size_t budget = 0;
      for (auto& [count, i] : rare) {
        if (budget > 200000) break;
        for (int64_t x : exts_of_name[host.nodes[i].name]) ++votes[x - host.nodes[i].rf_id];
        budget += count;
      }
      std::vector<std::pair<size_t, int64_t>> cands;
      for (auto& [d, v] : votes) cands.emplace_back(v, d);
      std::sort(cands.begin(), cands.end(), [](auto& a, auto& b) {
        return a.first != b.first ? a.first > b.first : std::llabs(a.second) < std::llabs(b.second);
      });
      if (cands.size() > 8) cands.resize(8);
      for (int64_t d : {0, 1}) cands.emplace_back(0, d);  // the documented cases, if nothing better
      size_t best = 0;
      int64_t best_d = 0;
      for (auto& [v, d] : cands) {
        size_t score = 0;
        for (uint32_t i : members) {
          auto it = by_ext.find(host.nodes[i].rf_id + d);
          if (it != by_ext.end() && kt.cpu[it->second].name == host.nodes[i].name) ++score;
        }
        if (score > best) {
          best = score;
          best_d = d;
        }
      }
      offset_of_tid[tid] = best_d;
      if (members.size() > st.external_id_offset_nodes) {
        st.external_id_offset_nodes = members.size();
        st.external_id_offset = best_d;
      }
    }
    std::vector<std::pair<int64_t, int64_t>> sorted_offsets(offset_of_tid.begin(), offset_of_tid.end());
    std::sort(sorted_offsets.begin(), sorted_offsets.end());
    for (auto& [tid, d] : sorted_offsets) {
      if (!st.external_id_offsets.empty()) st.external_id_offsets += ", ";
      st.external_id_offsets += "host tid " + std::to_string(tid) + ": " + (d >= 0 ? "+" : "") + std::to_string(d);
    }
  }
  st.match_key = use_rf ? "Record function id" : "External id";
  for (uint32_t i = 0; i < ncpu; ++i) {
    auto& op = kt.cpu[i];
    if (use_rf && op.has_rf_id) {
      cl[i].has_key = true;
      cl[i].key = op.rf_id;
    } else if (!use_rf && op.external_id != kNoExternalId) {
      cl[i].has_key = true;
      cl[i].key = op.external_id;
    }
  }
  // Last writer in ts order, as the reference. Default mode: Record function id 0 means "none"
  // (ops recorded while the ET observer was off all carry it), so it matches nothing instead of
  // pairing every host node with rf_id 0 with whichever such op came last.
  std::unordered_map<int64_t, uint32_t> by_key;
  by_key.reserve(ncpu * 2);
  for (uint32_t i = 0; i < ncpu; ++i)
    if (cl[i].has_key && (compat || !use_rf || cl[i].key != 0)) by_key[cl[i].key] = i;

  // ---- GPU op -> launch (correlation) -> CPU op (same tid + External id, else same tid) ----
  std::unordered_map<int64_t, uint32_t> launch_by_corr;
  launch_by_corr.reserve(kt.launches.size() * 2);
  for (uint32_t i = 0; i < kt.launches.size(); ++i) launch_by_corr.emplace(kt.launches[i].correlation, i);
  std::unordered_map<std::pair<uint32_t, int64_t>, std::vector<uint32_t>, PairHash> by_tid_ext;
  by_tid_ext.reserve(ncpu * 2);
  for (uint32_t i = 0; i < ncpu; ++i) by_tid_ext[{kt.cpu[i].tid, kt.cpu[i].external_id}].push_back(i);
  std::vector<std::vector<uint32_t>> pos_by_tid(kt.tids.size());
  for (uint32_t i = 0; i < ncpu; ++i) pos_by_tid[kt.cpu[i].tid].push_back(i);

  // last position < limit in `list`, skipping "nccl:coalesced" ops for NCCL kernels
  auto last_before = [&](const std::vector<uint32_t>& list, uint32_t limit, bool nccl) -> int64_t {
    auto it = std::lower_bound(list.begin(), list.end(), limit);
    while (it != list.begin()) {
      --it;
      if (nccl && kt.cpu[*it].name == "nccl:coalesced") continue;
      return *it;
    }
    return -1;
  };
  std::unordered_map<int64_t, std::vector<uint32_t>> gpu_by_parent_ext;
  for (uint32_t g = 0; g < kt.gpu.size(); ++g) {
    const auto& gop = kt.gpu[g];
    auto lit = launch_by_corr.find(gop.correlation);
    if (lit == launch_by_corr.end()) {
      ++st.gpu_ops_orphaned;
      continue;
    }
    const auto& launch = kt.launches[lit->second];
    // bisect_left over CPU op start times: ops starting exactly at the launch ts are excluded
    uint32_t limit = uint32_t(std::lower_bound(kt.cpu.begin(), kt.cpu.end(), launch.ts,
                                               [](const KinetoCpuOp& op, const PyNum& t) { return op.ts < t; }) -
                              kt.cpu.begin());
    const bool nccl = contains_nccl_ci(gop.name);
    int64_t parent = -1;
    auto eit = by_tid_ext.find({launch.tid, gop.external_id});
    if (eit != by_tid_ext.end()) parent = last_before(eit->second, limit, nccl);
    if (parent < 0) parent = last_before(pos_by_tid[launch.tid], limit, nccl);
    if (parent < 0) {
      ++st.gpu_ops_orphaned;
      continue;
    }
    ++st.gpu_ops_parented;
    gpu_by_parent_ext[kt.cpu[size_t(parent)].external_id].push_back(g);
  }

  // ---- inter-thread dependencies (1000 us gap rule, docs/chakra.md §4.5) ------------------
  {
    const PyNum threshold = PyNum::of_int(1000);
    const PyNum zero = PyNum::of_int(0);
    for (size_t t = 0; t < by_tid.size(); ++t) {
      const auto& ops = by_tid[t];
      bool group_has = false;
      int64_t group_key = 0;
      for (size_t i = 0; i < ops.size(); ++i) {
        const auto& op = kt.cpu[ops[i]];
        bool opener = i == 0;
        if (!opener) {
          const auto& prev = kt.cpu[ops[i - 1]];
          opener = py_sub(py_sub(op.ts, prev.ts), prev.dur) > threshold;
        }
        if (opener) {
          // latest op (ts > 0, ts < op.ts) on any other thread; ties: earlier thread, earlier op
          int64_t found = -1;
          PyNum best = zero;
          for (size_t u = 0; u < by_tid.size(); ++u) {
            if (u == t) continue;
            const auto& other = by_tid[u];
            auto it = std::lower_bound(other.begin(), other.end(), op.ts,
                                       [&](uint32_t a, const PyNum& x) { return kt.cpu[a].ts < x; });
            if (it == other.begin()) continue;
            const PyNum cand = kt.cpu[*(it - 1)].ts;
            if (!(cand > best)) continue;
            auto first = std::lower_bound(other.begin(), other.end(), cand,
                                          [&](uint32_t a, const PyNum& x) { return kt.cpu[a].ts < x; });
            best = cand;
            found = *first;
          }
          group_has = found >= 0 && cl[size_t(found)].has_key && cl[size_t(found)].key != 0;
          group_key = group_has ? cl[size_t(found)].key : 0;
        }
        if (group_has) {
          cl[ops[i]].has_itd = true;
          cl[ops[i]].itd_key = group_key;
        }
      }
    }
  }

  // ---- narrow sync dependencies (first ProfilerStep only, docs/chakra.md §4.3/§8) --------
  // GPU op (index) -> CPU ops (index) that must wait for it.
  std::unordered_map<uint32_t, std::vector<uint32_t>> gpu_sync;
  if (kt.first_profiler_step && !kt.sync_calls.empty()) {
    const auto [ws, we] = *kt.first_profiler_step;
    std::unordered_map<int64_t, std::string_view> stream_of_corr;
    for (auto& r : kt.sync_records) stream_of_corr.emplace(r.correlation, r.stream_json);
    // GPU ops by end time, per stream and overall
    std::vector<std::pair<PyNum, uint32_t>> all_by_end;
    std::unordered_map<std::string_view, std::vector<std::pair<PyNum, uint32_t>>> by_stream_end;
    for (uint32_t g = 0; g < kt.gpu.size(); ++g) {
      PyNum e = py_add(kt.gpu[g].ts, kt.gpu[g].dur);
      all_by_end.emplace_back(e, g);
      by_stream_end[kt.gpu[g].stream_json].emplace_back(e, g);
    }
    auto end_less = [](const std::pair<PyNum, uint32_t>& a, const std::pair<PyNum, uint32_t>& b) {
      int c = py_cmp(a.first, b.first);
      return c != 0 ? c < 0 : a.second < b.second;
    };
    std::sort(all_by_end.begin(), all_by_end.end(), end_less);
    for (auto& [k, v] : by_stream_end) std::sort(v.begin(), v.end(), end_less);
    std::vector<std::pair<int64_t, std::vector<int64_t>>> sync_deps;  // end External id -> start External ids
    for (auto& call : kt.sync_calls) {
      PyNum call_end = py_add(call.ts, call.dur);
      if (call.ts < ws || we < call_end || call.external_id == kNoExternalId) continue;
      const std::vector<std::pair<PyNum, uint32_t>>* list = &all_by_end;
      auto sit = stream_of_corr.find(call.correlation);
      if (!call.device_wide && sit != stream_of_corr.end()) {
        auto bit = by_stream_end.find(sit->second);
        if (bit == by_stream_end.end()) continue;
        list = &bit->second;
      }
      auto it = std::upper_bound(list->begin(), list->end(), call_end,
                                 [](const PyNum& x, const std::pair<PyNum, uint32_t>& a) { return x < a.first; });
      if (it == list->begin()) continue;
      const auto& start = kt.gpu[(it - 1)->second];
      if (start.external_id == kNoExternalId || start.external_id == call.external_id) continue;
      auto dit = std::find_if(sync_deps.begin(), sync_deps.end(), [&](auto& p) { return p.first == call.external_id; });
      if (dit == sync_deps.end()) sync_deps.push_back({call.external_id, {}}), dit = sync_deps.end() - 1;
      dit->second.push_back(start.external_id);
    }
    if (!sync_deps.empty()) {
      std::unordered_map<int64_t, uint32_t> last_gpu_by_ext;
      for (uint32_t g = 0; g < kt.gpu.size(); ++g) last_gpu_by_ext[kt.gpu[g].external_id] = g;
      for (auto& ops : by_tid)
        for (uint32_t i : ops) {
          auto dit = std::find_if(sync_deps.begin(), sync_deps.end(),
                                  [&](auto& p) { return p.first == kt.cpu[i].external_id; });
          if (dit == sync_deps.end()) continue;
          // first CPU op starting strictly after this one (bisect_right)
          auto nit = std::upper_bound(kt.cpu.begin(), kt.cpu.end(), kt.cpu[i].ts,
                                      [](const PyNum& x, const KinetoCpuOp& op) { return x < op.ts; });
          if (nit == kt.cpu.end()) continue;
          uint32_t next = uint32_t(nit - kt.cpu.begin());
          for (int64_t sext : dit->second) {
            auto git = last_gpu_by_ext.find(sext);
            if (git == last_gpu_by_ext.end()) continue;
            auto& lst = gpu_sync[git->second];
            if (std::find(lst.begin(), lst.end(), next) == lst.end()) lst.push_back(next);
          }
        }
    }
  }

  // ---- host op <-> Kineto op matching, in host id order ------------------------------------
  std::unordered_map<int64_t, uint32_t> node_by_id;
  node_by_id.reserve(nhost * 2);
  for (uint32_t i = 0; i < nhost; ++i) node_by_id.emplace(host.nodes[i].id, i);
  std::vector<uint32_t> order(nhost);
  for (uint32_t i = 0; i < nhost; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return host.nodes[a].id < host.nodes[b].id; });
  std::vector<uint32_t> rank_of(nhost);
  for (uint32_t r = 0; r < nhost; ++r) rank_of[order[r]] = r;

  std::vector<uint8_t> eligible(nhost, 1);
  if (compat) {
    // only the subtree of node id 1 (the process root) is linked by the reference
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
  }

  std::vector<int32_t> match(nhost, kNone);     // host node -> Kineto CPU op
  std::vector<int32_t> itd_node(nhost, kNone);  // host node -> host node it waits on
  std::vector<int32_t> cpu_host(ncpu, kNone);
  for (uint32_t r = 0; r < nhost; ++r) {
    const uint32_t h = order[r];
    const auto& n = host.nodes[h];
    if (!eligible[h] || !n.has_rf_id) continue;
    ++st.candidates;
    int64_t key = n.rf_id;
    if (!use_rf) {
      auto oit = offset_of_tid.find(n.tid);
      key += oit == offset_of_tid.end() ? 0 : oit->second;
    }
    auto it = by_key.find(key);
    if (it == by_key.end()) continue;
    const uint32_t k = it->second;
    // a guessed offset is only trusted where the op names agree
    if (!use_rf && kt.cpu[k].name != n.name) {
      ++st.matched_name_mismatch;
      continue;
    }
    cpu_host[k] = int32_t(h);
    match[h] = int32_t(k);
    ++st.matched;
    if (use_rf && kt.cpu[k].name != n.name) ++st.matched_name_mismatch;
    if (cl[k].has_itd) {
      auto dit = by_key.find(cl[k].itd_key);
      if (dit != by_key.end() && cpu_host[dit->second] != kNone) itd_node[h] = cpu_host[dit->second];
    }
  }
  auto gpu_list_of = [&](uint32_t h) -> const std::vector<uint32_t>* {
    if (match[h] == kNone) return nullptr;
    auto it = gpu_by_parent_ext.find(kt.cpu[size_t(match[h])].external_id);
    return it == gpu_by_parent_ext.end() ? nullptr : &it->second;
  };

  // ---- new ids: host nodes in id order, each followed by its GPU copies ----------------------
  std::vector<int64_t> new_id(nhost);
  int64_t next_id = 0;
  for (uint32_t r = 0; r < nhost; ++r) {
    const uint32_t h = order[r];
    new_id[h] = next_id++;
    if (auto* g = gpu_list_of(h)) next_id += int64_t(g->size());
  }
  // Parent values, decided up front in output order (the reference mints fresh ids for parents
  // that are not nodes in that order): kKeep = leave the field as it is, kNull = null.
  constexpr int64_t kKeep = INT64_MIN, kNull = INT64_MIN + 1;
  std::vector<int64_t> parent_out(nhost, kKeep);
  {
    std::unordered_map<int64_t, int64_t> minted;
    int64_t null_minted = -1;
    for (uint32_t r = 0; r < nhost; ++r) {
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
  }

  // sync_dep placement: target node new id -> GPU copy ids (computed while emitting GPU copies,
  // which precede every node they can target only in compat's lookup order; so gather first)
  std::vector<std::pair<int64_t, std::vector<int64_t>>> sync_map;  // insertion-ordered
  if (!gpu_sync.empty()) {
    for (uint32_t r = 0; r < nhost; ++r) {
      const uint32_t h = order[r];
      auto* g = gpu_list_of(h);
      if (!g) continue;
      int64_t gid = new_id[h];
      for (uint32_t gi : *g) {
        ++gid;
        auto sit = gpu_sync.find(gi);
        if (sit == gpu_sync.end()) continue;
        std::vector<int64_t> to;
        for (uint32_t c : sit->second) {
          if (cpu_host[c] == kNone) continue;
          const uint32_t th = uint32_t(cpu_host[c]);
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
  }
  std::unordered_map<int64_t, const std::vector<int64_t>*> sync_on;  // node new id -> list
  for (auto& [k, lst] : sync_map) {
    int64_t target = k;
    if (compat) {  // the reference looks the (already new) id up again as an original id
      auto it = node_by_id.find(k);
      target = it != node_by_id.end() ? new_id[it->second] : k;
    }
    sync_on[target] = &lst;
  }

  // ---- write: nodes are formatted in blocks by worker threads, written in order --------------
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
  auto emit_rank = [&](uint32_t r, Worker& w) {
    const uint32_t h = order[r];
    const auto& n = host.nodes[h];
    dom::element el;
    if (auto e = w.parser.parse(host.text.data() + n.begin, n.length, false).get(el))
      throw InputError(opt.host_path, "node id " + std::to_string(n.id), simdjson::error_message(e));
    auto& fields = w.fields;
    fields.clear();
    for (auto f : dom::object(el)) {
      bool dup = false;
      for (auto& x : fields)
        if (x.key == f.key) {  // Python keeps the first position and the last value
          x.value = f.value;
          dup = true;
        }
      if (!dup) fields.push_back(Field{f.key, true, f.value, {}});
    }
    const std::string_view parent_key = (!compat && n.flat_schema) ? "parent" : "ctrl_deps";
    set_field(fields, "id", std::to_string(new_id[h]));
    const int32_t k = match[h];
    if (k != kNone) {
      const auto& op = kt.cpu[size_t(k)];
      set_field(fields, "inclusive_dur", num_text(op.dur));
      set_field(fields, "exclusive_dur", num_text(op.exclusive));
      set_field(fields, "ts", num_text(op.ts));
      if (itd_node[h] != kNone) {
        set_field(fields, "inter_thread_dep", std::to_string(new_id[size_t(itd_node[h])]));
        ++w.stats.inter_thread;
      } else {
        set_field(fields, "inter_thread_dep", "null");
      }
    }
    const auto* glist = gpu_list_of(h);
    if (glist) w.gfields = fields;  // the GPU copies start from the updated CPU node
    auto finish = [&](std::vector<Field>& fs, int64_t id, bool host_node) {
      auto sit = sync_on.find(id);
      if (sit != sync_on.end()) {
        set_field(fs, "sync_dep", int_list_text(*sit->second, pretty));
        ++w.stats.sync_nodes;
      }
      if (!host_node) {
        set_field(fs, parent_key, std::to_string(new_id[h]));
      } else if (parent_out[h] != kKeep && has_field(fs, parent_key)) {
        set_field(fs, parent_key, parent_out[h] == kNull ? std::string("null") : std::to_string(parent_out[h]));
      }
      if (r != 0 || !host_node) w.out.push_back(',');
      emit_node(fs, pretty, w.out);
      ++w.stats.nodes;
    };
    finish(fields, new_id[h], true);
    if (!glist) return;
    int64_t gid = new_id[h];
    for (uint32_t gi : *glist) {
      const auto& gop = kt.gpu[gi];
      auto& g = w.g;
      g = w.gfields;
      set_field(g, "id", std::to_string(++gid));
      set_field(g, parent_key, "0");  // set by finish(); here it keeps the key's position
      std::string t;
      py_json_string(gop.cat, t);
      set_field(g, "cat", t);
      t.clear();
      py_json_string(gop.name, t);
      set_field(g, "name", t);
      set_field(g, "ph", std::string(gop.ph_json));
      set_field(g, "inclusive_dur", num_text(gop.dur));
      set_field(g, "exclusive_dur", num_text(gop.dur));
      set_field(g, "ts", num_text(gop.ts));
      set_field(g, "stream", std::string(gop.stream_json));
      if (!gop.pg_name_json.empty() && gop.name.find("ncclDevKernel") != std::string_view::npos)
        set_field(g, "pg_name", std::string(gop.pg_name_json));
      ++w.stats.gpu;
      finish(g, gid, false);
    }
  };

  AtomicOutput out(opt.output_path);
  std::string buf;
  dom::parser parser;
  buf.push_back('{');
  bool first_top = true;
  const unsigned nthreads = std::max(1u, std::min(4u, std::thread::hardware_concurrency()));
  std::vector<Worker> workers(nthreads);
  for (auto& [key, raw] : host.top_level) {
    if (!first_top) buf += pretty ? "," : ", ";
    first_top = false;
    if (pretty) py_json_indent(1, buf);
    py_json_string(key, buf);
    buf += ": ";
    if (key != "nodes") {
      dom::element v;
      if (auto e = parser.parse(raw.data(), raw.size(), false).get(v))
        throw InputError(opt.host_path, "\"" + key + "\"", std::string("invalid JSON: ") + simdjson::error_message(e));
      if (pretty) py_json_element(v, 1, buf);
      else py_json_element_compact(v, buf);
      continue;
    }
    if (nhost == 0) {
      buf += "[]";
      continue;
    }
    buf.push_back('[');
    out.write(buf);
    buf.clear();
    constexpr uint32_t kBlock = 2048;  // host nodes per block
    for (uint32_t r0 = 0; r0 < nhost; r0 += kBlock * nthreads) {
      auto work = [&](unsigned t) {
        Worker& w = workers[t];
        w.out.clear();
        const uint32_t b = r0 + t * kBlock, e = std::min<uint32_t>(uint32_t(nhost), b + kBlock);
        try {
          for (uint32_t r = b; r < e; ++r) emit_rank(r, w);
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
    if (pretty) py_json_indent(1, buf);
    else buf.push_back('\n');
    buf.push_back(']');
  }
  if (pretty && !host.top_level.empty()) py_json_indent(0, buf);
  buf.push_back('}');
  if (!pretty) buf.push_back('\n');
  out.write(buf);
  out.commit();
  for (auto& w : workers) {
    st.inter_thread_deps += w.stats.inter_thread;
    st.sync_dep_nodes += w.stats.sync_nodes;
    st.gpu_nodes_emitted += w.stats.gpu;
    st.output_nodes += w.stats.nodes;
  }
  return st;
}

}  // namespace opf::chakra
