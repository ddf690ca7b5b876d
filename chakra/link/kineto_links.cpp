#include "kineto_links.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string_view>

#include "exclusive_time.h"
#include "input_error.h"
#include "py_json.h"

namespace opf::chakra::linker {

namespace {

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

using ExtsOfName = std::unordered_map<std::string_view, std::vector<int64_t>>;

// The offset is voted by ops with rare names (cheap and unambiguous), within a budget of votes;
// the best few candidates, plus the documented offsets 0 and 1, go on to be scored.
std::vector<std::pair<size_t, int64_t>> candidate_offsets(const std::vector<uint32_t>& members, const HostEtIndex& host,
                                                          ExtsOfName& exts_of_name) {
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
  cands.reserve(votes.size());
  for (auto& [d, v] : votes) cands.emplace_back(v, d);
  std::sort(cands.begin(), cands.end(), [](auto& a, auto& b) {
    return a.first != b.first ? a.first > b.first : std::llabs(a.second) < std::llabs(b.second);
  });
  if (cands.size() > 8) cands.resize(8);
  for (int64_t d : {0, 1}) cands.emplace_back(0, d);  // the documented cases, if nothing better
  return cands;
}

// The candidate under which the most of the thread's nodes find an op of their own name.
int64_t best_scoring_offset(const std::vector<std::pair<size_t, int64_t>>& cands, const std::vector<uint32_t>& members,
                            const HostEtIndex& host, const KinetoTrace& kt,
                            const std::unordered_map<int64_t, uint32_t>& by_ext) {
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
  return best_d;
}

std::string describe_offsets(const std::unordered_map<int64_t, int64_t>& offset_of_tid) {
  std::string s;
  std::vector<std::pair<int64_t, int64_t>> sorted_offsets(offset_of_tid.begin(), offset_of_tid.end());
  std::sort(sorted_offsets.begin(), sorted_offsets.end());
  for (auto& [tid, d] : sorted_offsets) {
    if (!s.empty()) s += ", ";
    s += "host tid " + std::to_string(tid) + ": " + (d >= 0 ? "+" : "") + std::to_string(d);
  }
  return s;
}

// last position < limit in `list`, skipping "nccl:coalesced" ops for NCCL kernels
int64_t last_before(const KinetoTrace& kt, const std::vector<uint32_t>& list, uint32_t limit, bool nccl) {
  auto it = std::lower_bound(list.begin(), list.end(), limit);
  while (it != list.begin()) {
    --it;
    if (nccl && kt.cpu[*it].name == "nccl:coalesced") continue;
    return *it;
  }
  return -1;
}

// Latest op (ts > 0, ts < `ts`) on any thread but `t`; ties: earlier thread, earlier op.
int64_t latest_op_on_other_threads(const KinetoTrace& kt, const OpsByThread& by_tid, size_t t, const PyNum& ts) {
  const PyNum zero = PyNum::of_int(0);
  int64_t found = -1;
  PyNum best = zero;
  for (size_t u = 0; u < by_tid.size(); ++u) {
    if (u == t) continue;
    const auto& other = by_tid[u];
    auto it =
        std::lower_bound(other.begin(), other.end(), ts, [&](uint32_t a, const PyNum& x) { return kt.cpu[a].ts < x; });
    if (it == other.begin()) continue;
    const PyNum cand = kt.cpu[*(it - 1)].ts;
    if (!(cand > best)) continue;
    auto first = std::lower_bound(other.begin(), other.end(), cand,
                                  [&](uint32_t a, const PyNum& x) { return kt.cpu[a].ts < x; });
    best = cand;
    found = *first;
  }
  return found;
}

using EndList = std::vector<std::pair<PyNum, uint32_t>>;  // (GPU op end, GPU op), by end

// End External id -> start External ids, for sync calls inside the first ProfilerStep.
std::vector<std::pair<int64_t, std::vector<int64_t>>> sync_deps_by_external_id(const KinetoTrace& kt) {
  const auto [ws, we] = *kt.first_profiler_step;
  std::unordered_map<int64_t, std::string_view> stream_of_corr;
  for (auto& r : kt.sync_records) stream_of_corr.emplace(r.correlation, r.stream_json);
  // GPU ops by end time, per stream and overall
  EndList all_by_end;
  std::unordered_map<std::string_view, EndList> by_stream_end;
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
    const EndList* list = &all_by_end;
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
  return sync_deps;
}

}  // namespace

std::string num_text(const PyNum& n) {
  std::string s;
  py_json_num(n, s);
  return s;
}

OpsByThread group_cpu_ops_by_thread(const KinetoTrace& kt) {
  std::vector<int32_t> tid_slot(kt.tids.size(), kNone);
  OpsByThread by_tid;
  for (uint32_t i = 0; i < kt.cpu.size(); ++i) {
    auto& slot = tid_slot[kt.cpu[i].tid];
    if (slot == kNone) {
      slot = int32_t(by_tid.size());
      by_tid.emplace_back();
    }
    by_tid[size_t(slot)].push_back(i);
  }
  return by_tid;
}

void assign_exclusive_durations(KinetoTrace& kt, const OpsByThread& by_tid, bool compat,
                                const std::string& kineto_path) {
  for (auto& ops : by_tid) {
    std::vector<TimedOp> timed(ops.size());
    for (size_t k = 0; k < ops.size(); ++k) timed[k] = {kt.cpu[ops[k]].ts, kt.cpu[ops[k]].dur, kt.cpu[ops[k]].event};
    int64_t neg = -1;
    auto excl = compute_exclusive(timed, compat ? TieOrder::reference : TieOrder::parent_first, neg);
    if (neg >= 0) {
      const auto& op = kt.cpu[ops[size_t(neg)]];
      throw InputError(kineto_path, "event #" + std::to_string(op.event),
                       "exclusive duration of '" + std::string(op.name) + "' (ts " + num_text(op.ts) + ", dur " +
                           num_text(op.dur) +
                           ") is below zero: the merged lengths of the ops inside it exceed its duration "
                           "(float rounding); the reference aborts here too");
    }
    for (size_t k = 0; k < ops.size(); ++k) kt.cpu[ops[k]].exclusive = excl[k];
  }
}

bool uses_record_function_id(const KinetoTrace& kt, bool compat) {
  if (compat) return true;
  for (auto& op : kt.cpu)
    if (op.has_rf_id && op.rf_id != 0) return true;
  return false;
}

// Per host thread, External id = rf_id + offset (older PyTorch numbers the ops of each thread
// from its own base).
std::unordered_map<int64_t, int64_t> detect_external_id_offsets(const KinetoTrace& kt, const HostEtIndex& host,
                                                                LinkStats& st) {
  const size_t ncpu = kt.cpu.size();
  std::unordered_map<int64_t, int64_t> offset_of_tid;
  std::unordered_map<int64_t, uint32_t> by_ext;
  by_ext.reserve(ncpu * 2);
  ExtsOfName exts_of_name;
  for (uint32_t i = 0; i < ncpu; ++i)
    if (kt.cpu[i].external_id != kNoExternalId) {
      by_ext[kt.cpu[i].external_id] = i;
      exts_of_name[kt.cpu[i].name].push_back(kt.cpu[i].external_id);
    }
  std::unordered_map<int64_t, std::vector<uint32_t>> host_by_tid;
  for (uint32_t i = 0; i < host.nodes.size(); ++i)
    if (host.nodes[i].has_rf_id) host_by_tid[host.nodes[i].tid].push_back(i);
  for (auto& [tid, members] : host_by_tid) {
    auto cands = candidate_offsets(members, host, exts_of_name);
    const int64_t best_d = best_scoring_offset(cands, members, host, kt, by_ext);
    offset_of_tid[tid] = best_d;
    if (members.size() > st.external_id_offset_nodes) {
      st.external_id_offset_nodes = members.size();
      st.external_id_offset = best_d;
    }
  }
  st.external_id_offsets = describe_offsets(offset_of_tid);
  return offset_of_tid;
}

std::vector<CpuLink> assign_match_keys(const KinetoTrace& kt, bool use_rf) {
  std::vector<CpuLink> cl(kt.cpu.size());
  for (uint32_t i = 0; i < kt.cpu.size(); ++i) {
    auto& op = kt.cpu[i];
    if (use_rf && op.has_rf_id) {
      cl[i].has_key = true;
      cl[i].key = op.rf_id;
    } else if (!use_rf && op.external_id != kNoExternalId) {
      cl[i].has_key = true;
      cl[i].key = op.external_id;
    }
  }
  return cl;
}

// Last writer in ts order, as the reference. Default mode: Record function id 0 means "none"
// (ops recorded while the ET observer was off all carry it), so it matches nothing instead of
// pairing every host node with rf_id 0 with whichever such op came last.
std::unordered_map<int64_t, uint32_t> index_ops_by_key(const std::vector<CpuLink>& cl, bool compat, bool use_rf) {
  std::unordered_map<int64_t, uint32_t> by_key;
  by_key.reserve(cl.size() * 2);
  for (uint32_t i = 0; i < cl.size(); ++i)
    if (cl[i].has_key && (compat || !use_rf || cl[i].key != 0)) by_key[cl[i].key] = i;
  return by_key;
}

// GPU op -> launch (correlation) -> CPU op (same tid + External id, else same tid).
std::unordered_map<int64_t, std::vector<uint32_t>> parent_gpu_ops_to_cpu_ops(const KinetoTrace& kt, LinkStats& st) {
  const size_t ncpu = kt.cpu.size();
  std::unordered_map<int64_t, uint32_t> launch_by_corr;
  launch_by_corr.reserve(kt.launches.size() * 2);
  for (uint32_t i = 0; i < kt.launches.size(); ++i) launch_by_corr.emplace(kt.launches[i].correlation, i);
  std::unordered_map<std::pair<uint32_t, int64_t>, std::vector<uint32_t>, PairHash> by_tid_ext;
  by_tid_ext.reserve(ncpu * 2);
  for (uint32_t i = 0; i < ncpu; ++i) by_tid_ext[{kt.cpu[i].tid, kt.cpu[i].external_id}].push_back(i);
  std::vector<std::vector<uint32_t>> pos_by_tid(kt.tids.size());
  for (uint32_t i = 0; i < ncpu; ++i) pos_by_tid[kt.cpu[i].tid].push_back(i);

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
    if (eit != by_tid_ext.end()) parent = last_before(kt, eit->second, limit, nccl);
    if (parent < 0) parent = last_before(kt, pos_by_tid[launch.tid], limit, nccl);
    if (parent < 0) {
      ++st.gpu_ops_orphaned;
      continue;
    }
    ++st.gpu_ops_parented;
    gpu_by_parent_ext[kt.cpu[size_t(parent)].external_id].push_back(g);
  }
  return gpu_by_parent_ext;
}

// 1000 us gap rule (docs/chakra.md §4.5): the op opening a group after a gap waits on the latest
// op of another thread, and the whole group inherits that dependency.
void link_inter_thread_deps(const KinetoTrace& kt, const OpsByThread& by_tid, std::vector<CpuLink>& cl) {
  const PyNum threshold = PyNum::of_int(1000);
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
        const int64_t found = latest_op_on_other_threads(kt, by_tid, t, op.ts);
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

// Narrow sync dependencies (first ProfilerStep only, docs/chakra.md §4.3/§8): the CPU op that starts
// after an op making a sync call waits for the GPU op that the call waited on.
std::unordered_map<uint32_t, std::vector<uint32_t>> find_sync_deps(const KinetoTrace& kt, const OpsByThread& by_tid) {
  std::unordered_map<uint32_t, std::vector<uint32_t>> gpu_sync;
  if (!kt.first_profiler_step || kt.sync_calls.empty()) return gpu_sync;
  const auto sync_deps = sync_deps_by_external_id(kt);
  if (sync_deps.empty()) return gpu_sync;
  std::unordered_map<int64_t, uint32_t> last_gpu_by_ext;
  for (uint32_t g = 0; g < kt.gpu.size(); ++g) last_gpu_by_ext[kt.gpu[g].external_id] = g;
  for (auto& ops : by_tid)
    for (uint32_t i : ops) {
      auto dit =
          std::find_if(sync_deps.begin(), sync_deps.end(), [&](auto& p) { return p.first == kt.cpu[i].external_id; });
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
  return gpu_sync;
}

}  // namespace opf::chakra::linker
