#include "simulator.h"

#include <deque>
#include <map>
#include <queue>
#include <set>
#include <unordered_map>

#include "id_index.h"

namespace opf::chakra {

namespace {
std::string tid_text(const EtNode& n) { return n.has_tid ? std::to_string(n.tid) : "None"; }
std::string stream_text(const EtNode& n) { return n.has_stream ? std::to_string(n.stream) : "None"; }

// parent -> children from data_deps, children in map order (CSR); remaining = unmet deps per node
struct DepGraph {
  std::vector<uint32_t> remaining, child_begin, child_list;
};

DepGraph index_children(const std::vector<EtNode>& nodes) {
  const uint32_t n = uint32_t(nodes.size());
  IdIndex pos;
  pos.build(n, [&](size_t i) { return nodes[i].id; });
  DepGraph g;
  g.remaining.assign(n, 0);
  g.child_begin.assign(n + 1, 0);
  for (uint32_t i = 0; i < n; ++i)
    for (uint64_t d : nodes[i].data_deps) {
      ++g.remaining[i];
      uint32_t p = pos.find(d);
      if (p != IdIndex::kNone) ++g.child_begin[p + 1];
    }
  for (uint32_t i = 0; i < n; ++i) g.child_begin[i + 1] += g.child_begin[i];
  g.child_list.resize(g.child_begin[n]);
  std::vector<uint32_t> fill(g.child_begin.begin(), g.child_begin.end() - 1);
  for (uint32_t i = 0; i < n; ++i)
    for (uint64_t d : nodes[i].data_deps) {
      uint32_t p = pos.find(d);
      if (p != IdIndex::kNone) g.child_list[fill[p]++] = i;
    }
  return g;
}

struct Stream {
  std::deque<std::pair<uint64_t, uint32_t>> queue;  // (ready sequence, node)
  bool busy = false;
  uint32_t node = 0;
  uint64_t start = 0;
};

// The state of one tick-by-tick replay: one CPU, one queue per GPU stream.
struct Replay {
  const std::vector<EtNode>& nodes;
  const std::function<void(const std::string&)>& emit;
  const SimSpan& span;
  DepGraph g;
  SimResult res;
  std::vector<Stream> streams;
  std::vector<uint32_t> node_stream;
  // Stream order for completion logs is first-*issue* order; remap lazily.
  std::vector<uint32_t> issue_rank;
  uint32_t next_rank = 0;
  std::deque<uint32_t> ready_cpu;
  std::set<std::pair<uint64_t, uint32_t>> issuable;  // (front ready seq, stream) for free streams
  uint64_t ready_seq = 0;
  size_t gpu_ready = 0;
  bool cpu_busy = false;
  uint32_t cpu_node = 0;
  uint64_t cpu_start = 0;
  // (completion time, stream) of running GPU nodes
  std::priority_queue<std::pair<uint64_t, uint32_t>, std::vector<std::pair<uint64_t, uint32_t>>, std::greater<>>
      gpu_done;
  size_t gpu_running = 0;
  uint64_t now = 0;
  std::vector<uint32_t> issued;
  std::vector<uint32_t> completing;

  Replay(const std::vector<EtNode>& nodes_, const std::function<void(const std::string&)>& emit_, const SimSpan& span_)
      : nodes(nodes_), emit(emit_), span(span_), g(index_children(nodes_)) {}

  uint64_t finish_time(uint64_t start, uint32_t i) const { return start + std::max<uint64_t>(nodes[i].duration, 1); }
  bool has_work() const { return !ready_cpu.empty() || gpu_ready > 0 || cpu_busy || gpu_running > 0; }

  // streams: index by (has_stream, stream); the completion order within a tick follows the
  // order in which streams were first used (the reference's dict of running streams).
  void assign_streams() {
    std::map<std::pair<bool, int64_t>, uint32_t> stream_index;
    const uint32_t n = uint32_t(nodes.size());
    node_stream.assign(n, 0);
    for (uint32_t i = 0; i < n; ++i) {
      if (nodes[i].is_cpu) continue;
      auto key = std::make_pair(nodes[i].has_stream, nodes[i].has_stream ? nodes[i].stream : 0);
      auto [it, fresh] = stream_index.emplace(key, uint32_t(streams.size()));
      if (fresh) streams.emplace_back();
      node_stream[i] = it->second;
    }
    issue_rank.assign(streams.size(), UINT32_MAX);
  }

  void push_gpu(uint32_t i) {
    Stream& s = streams[node_stream[i]];
    if (s.queue.empty() && !s.busy) issuable.emplace(ready_seq, node_stream[i]);
    s.queue.emplace_back(ready_seq++, i);
    ++gpu_ready;
  }

  // nodes without deps start ready, by id
  void seed_ready_nodes() {
    std::vector<uint32_t> cpu0, gpu0;
    for (uint32_t i = 0; i < uint32_t(nodes.size()); ++i)
      if (g.remaining[i] == 0) (nodes[i].is_cpu ? cpu0 : gpu0).push_back(i);
    auto by_id = [&](uint32_t a, uint32_t b) { return nodes[a].id < nodes[b].id; };
    std::stable_sort(cpu0.begin(), cpu0.end(), by_id);
    std::stable_sort(gpu0.begin(), gpu0.end(), by_id);
    ready_cpu.assign(cpu0.begin(), cpu0.end());
    for (uint32_t i : gpu0) push_gpu(i);
  }

  // skip ticks in which nothing can be issued: jump to the tick before the next completion;
  // false when only blocked GPU work is left (cannot happen)
  bool skip_idle_ticks() {
    if ((cpu_busy || ready_cpu.empty()) && issuable.empty()) {
      uint64_t next = UINT64_MAX;
      if (cpu_busy) next = finish_time(cpu_start, cpu_node);
      if (!gpu_done.empty()) next = std::min(next, gpu_done.top().first);
      if (next == UINT64_MAX) return false;
      if (next - 1 > now) now = next - 1;
    }
    return true;
  }

  void issue_cpu() {
    if (cpu_busy || ready_cpu.empty()) return;
    cpu_node = ready_cpu.front();
    ready_cpu.pop_front();
    cpu_busy = true;
    cpu_start = now;
    issued.push_back(cpu_node);
    const EtNode& nd = nodes[cpu_node];
    emit("Issuing CPU Node ID " + std::to_string(nd.id) + " (" + std::string(nd.name) + ") at " + std::to_string(now) +
         "us with duration " + std::to_string(nd.duration) + "us, tid: " + tid_text(nd));
  }

  void issue_gpus() {
    while (!issuable.empty()) {
      auto [seq, si] = *issuable.begin();
      issuable.erase(issuable.begin());
      Stream& s = streams[si];
      uint32_t i = s.queue.front().second;
      s.queue.pop_front();
      --gpu_ready;
      s.busy = true;
      s.node = i;
      s.start = now;
      if (issue_rank[si] == UINT32_MAX) issue_rank[si] = next_rank++;
      gpu_done.emplace(finish_time(now, i), si);
      ++gpu_running;
      issued.push_back(i);
      const EtNode& nd = nodes[i];
      emit("Issuing GPU Node ID " + std::to_string(nd.id) + " (" + std::string(nd.name) + ") at " +
           std::to_string(now) + "us on stream " + stream_text(nd) + " with duration " + std::to_string(nd.duration) +
           "us, tid: stream " + stream_text(nd));
    }
  }

  void complete_cpu() {
    if (!cpu_busy || finish_time(cpu_start, cpu_node) > now) return;
    const EtNode& nd = nodes[cpu_node];
    emit("CPU Node ID " + std::to_string(nd.id) + " completed at " + std::to_string(now) + "us, tid: " + tid_text(nd));
    if (span) span(cpu_node, cpu_start, now);
    cpu_busy = false;
    res.makespan = now;
  }

  void complete_gpus() {
    completing.clear();
    while (!gpu_done.empty() && gpu_done.top().first <= now) {
      completing.push_back(gpu_done.top().second);
      gpu_done.pop();
    }
    std::sort(completing.begin(), completing.end(),
              [&](uint32_t a, uint32_t b) { return issue_rank[a] < issue_rank[b]; });
    for (uint32_t si : completing) {
      Stream& s = streams[si];
      const EtNode& nd = nodes[s.node];
      emit("GPU Node ID " + std::to_string(nd.id) + " on stream " + stream_text(nd) + " completed at " +
           std::to_string(now) + "us, tid: stream " + stream_text(nd));
      if (span) span(s.node, s.start, now);
      s.busy = false;
      --gpu_running;
      res.makespan = now;
      if (!s.queue.empty()) issuable.emplace(s.queue.front().first, si);
    }
  }

  // the reference releases dependents when their dependency is issued, not when it completes (docs/chakra.md §3.10)
  void release_children_of_issued() {
    for (uint32_t i : issued) {
      ++res.issued;
      for (uint32_t k = g.child_begin[i]; k < g.child_begin[i + 1]; ++k) {
        uint32_t c = g.child_list[k];
        if (g.remaining[c] > 0 && --g.remaining[c] == 0) {
          if (nodes[c].is_cpu) ready_cpu.push_back(c);
          else push_gpu(c);
        }
      }
    }
  }
};
}  // namespace

SimResult simulate(const std::vector<EtNode>& nodes, const std::function<void(const std::string&)>& emit,
                   const SimSpan& span) {
  Replay r(nodes, emit, span);
  r.assign_streams();
  r.seed_ready_nodes();
  while (r.has_work()) {
    if (!r.skip_idle_ticks()) break;
    r.issued.clear();
    r.issue_cpu();
    r.issue_gpus();
    ++r.now;
    r.complete_cpu();
    r.complete_gpus();
    r.release_children_of_issued();
  }
  emit("Simulation of Chakra node execution completed.");
  return r.res;
}

}  // namespace opf::chakra
