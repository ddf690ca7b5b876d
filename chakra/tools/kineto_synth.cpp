#include "kineto_synth.h"

#include <simdjson.h>

#include <cmath>
#include <random>
#include <unordered_map>

#include "atomic_output.h"
#include "common/json_escape.h"
#include "et_scale.h"
#include "host_et_index.h"
#include "input_error.h"
#include "py_json.h"

namespace opf::chakra {

namespace dom = simdjson::dom;

namespace {

struct Writer {
  AtomicOutput& out;
  std::string buf;
  bool first = true;
  void event(const std::string& body) {
    if (!first) buf += ",\n";
    first = false;
    buf += "  {";
    buf += body;
    buf += "}";
    if (buf.size() > (1 << 20)) {
      out.write(buf);
      buf.clear();
    }
  }
};

std::string us(double t) {  // microseconds with ns resolution, as PyTorch writes them
  std::string s;
  py_json_double(std::round(t * 1000.0) / 1000.0, s);
  return s;
}

std::string str(std::string_view s) {
  std::string o;
  opf::json::append_quoted(o, s, opf::json::Escape::python_ascii);
  return o;
}

std::string nccl_kernel(std::string_view op) {
  if (op.find("all_gather") != std::string_view::npos || op.find("allgather") != std::string_view::npos)
    return "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)";
  if (op.find("broadcast") != std::string_view::npos)
    return "ncclDevKernel_Broadcast_RING_LL(ncclDevComm*, unsigned long, ncclWork*)";
  if (op.find("reduce_scatter") != std::string_view::npos)
    return "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)";
  return "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)";
}

// The host tree as the profiler would see it: ops by id (record-function order), parents that are
// ET roots left out (the roots are not ops).
struct HostTree {
  std::vector<uint32_t> order;  // node indices by id
  std::vector<uint8_t> root, has_child;
  std::vector<int32_t> parent;  // -1: none (or an ET root)
};

HostTree index_host_tree(const HostEtIndex& h) {
  const size_t n = h.nodes.size();
  std::unordered_map<int64_t, uint32_t> by_id;
  by_id.reserve(n * 2);
  for (uint32_t i = 0; i < n; ++i) by_id.emplace(h.nodes[i].id, i);
  HostTree t;
  t.order.resize(n);
  for (uint32_t i = 0; i < n; ++i) t.order[i] = i;
  std::sort(t.order.begin(), t.order.end(), [&](uint32_t a, uint32_t b) { return h.nodes[a].id < h.nodes[b].id; });
  t.root.resize(n);
  t.has_child.resize(n);
  t.parent.assign(n, -1);
  for (uint32_t i = 0; i < n; ++i) t.root[i] = is_et_root_name(h.nodes[i].name);
  for (uint32_t i = 0; i < n; ++i) {
    const auto& nd = h.nodes[i];
    if (nd.parent_kind != ParentKind::integer) continue;
    auto it = by_id.find(nd.parent);
    if (it == by_id.end() || it->second == i || t.root[it->second]) continue;
    t.parent[i] = int32_t(it->second);
    t.has_child[it->second] = 1;
  }
  return t;
}

// host "tid" attribute of each node -> Kineto thread; whether the node's text mentions CUDA
struct NodeThreads {
  std::vector<uint32_t> thread;
  std::vector<uint8_t> cuda;
  size_t count = 0;
};

NodeThreads assign_threads(const HostEtIndex& h, const std::string& host_path, const std::vector<uint8_t>& root) {
  const size_t n = h.nodes.size();
  dom::parser parser;
  std::unordered_map<int64_t, uint32_t> thread_of_tid;
  NodeThreads nt;
  nt.thread.assign(n, 0);
  nt.cuda.assign(n, 0);
  for (uint32_t i = 0; i < n; ++i) {
    const auto& nd = h.nodes[i];
    if (root[i]) continue;
    std::string_view text(h.text.data() + nd.begin, nd.length);
    nt.cuda[i] = text.find("cuda") != std::string_view::npos;
    dom::element el;
    if (auto e = parser.parse(text.data(), text.size(), false).get(el))
      throw InputError(host_path, "node id " + std::to_string(nd.id), simdjson::error_message(e));
    int64_t tid = 0;
    dom::element tv;
    if (!el["tid"].get(tv) && tv.is_int64()) tid = int64_t(tv);
    dom::array attrs;
    if (!el["attrs"].get(attrs))
      for (auto a : attrs) {
        std::string_view an;
        if (!a["name"].get(an) && an == "tid") {
          dom::element av;
          if (!a["value"].get(av) && av.is_int64()) tid = int64_t(av);
        }
      }
    auto [it, fresh] = thread_of_tid.emplace(tid, uint32_t(thread_of_tid.size()));
    nt.thread[i] = it->second;
  }
  nt.count = thread_of_tid.size();
  return nt;
}

constexpr double kT0 = 1700000000000.0;  // trace start (us)
constexpr int64_t kPid = 1000;

void write_trace_header(Writer& w, size_t threads) {
  w.buf =
      "{\"schemaVersion\": 1, \"deviceProperties\": [{\"id\": 0, \"name\": \"SYNTHETIC GPU\"}], "
      "\"distributedInfo\": {\"backend\": \"nccl\", \"rank\": 0, \"world_size\": 2}, \"traceEvents\": [\n";
  w.event("\"name\": \"process_name\", \"ph\": \"M\", \"ts\": " + us(kT0) +
          ", \"pid\": 1000, \"tid\": 0, \"args\": {\"name\": \"python3\"}");
  for (size_t t = 0; t < threads; ++t)
    w.event("\"name\": \"thread_name\", \"ph\": \"M\", \"ts\": " + us(kT0) + ", \"pid\": 1000, \"tid\": " +
            std::to_string(4242 + t) + ", \"args\": {\"name\": \"thread " + std::to_string(4242 + t) + "\"}");
}

// Replays the host ops on a synthetic clock: every random draw comes from one seeded generator,
// in a fixed order, so that a seed gives the same bytes.
struct OpReplay {
  const HostEtIndex& h;
  const std::vector<uint32_t>& thread;
  Writer& w;
  SynthStats& st;
  std::mt19937_64 rng;
  double clock = kT0 + 100;
  int64_t ev_idx = 0, corr = 100;
  std::unordered_map<int, double> stream_free;

  OpReplay(const HostEtIndex& h_, const std::vector<uint32_t>& thread_, Writer& w_, SynthStats& st_, uint64_t seed)
      : h(h_), thread(thread_), w(w_), st(st_), rng(seed) {}

  double uni(double a, double b) { return std::uniform_real_distribution<double>(a, b)(rng); }

  // the CPU op's event, written when it ends (its duration is known then)
  void close_cpu_op(uint32_t i, double ts) {
    const auto& nd = h.nodes[i];
    const bool annotation = nd.name.size() > 2 && nd.name.substr(0, 2) == "##";
    std::string body = "\"ph\": \"X\", \"cat\": ";
    body += annotation ? "\"user_annotation\"" : "\"cpu_op\"";
    body += ", \"name\": " + str(nd.name) + ", \"pid\": " + std::to_string(kPid) +
            ", \"tid\": " + std::to_string(4242 + thread[i]) + ", \"ts\": " + us(ts) + ", \"dur\": " + us(clock - ts) +
            ", \"args\": {\"External id\": " + std::to_string(nd.rf_id) +
            ", \"Record function id\": " + std::to_string(nd.rf_id) + ", \"Ev Idx\": " + std::to_string(ev_idx++) + "}";
    w.event(body);
    ++st.cpu_ops;
    clock += uni(0.2, 1.0);
  }

  // a leaf that touches CUDA tensors (or a collective) launches one GPU op: runtime call, kernel
  // or memcpy on its stream, and the flow events that pair them
  void launch_gpu_op(uint32_t i, bool comm) {
    const auto& nd = h.nodes[i];
    const bool memcpy = !comm && (nd.name.find("copy") != std::string_view::npos || nd.name == "aten::to");
    const int stream = comm ? 20 : 7;
    const double lts = clock, ldur = uni(2.0, 8.0);
    const int64_t c = corr++;
    const std::string tid = std::to_string(4242 + thread[i]);
    const std::string ext = std::to_string(nd.rf_id);
    w.event("\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": " +
            std::string(comm     ? "\"cudaLaunchKernelExC\""
                        : memcpy ? "\"cudaMemcpyAsync\""
                                 : "\"cudaLaunchKernel\"") +
            ", \"pid\": 1000, \"tid\": " + tid + ", \"ts\": " + us(lts) + ", \"dur\": " + us(ldur) +
            ", \"args\": {\"External id\": " + ext + ", \"correlation\": " + std::to_string(c) + "}");
    ++st.launches;
    double& free_at = stream_free[stream];
    const double gts = std::max(free_at, lts + uni(1.0, 5.0)), gdur = uni(2.0, 40.0);
    free_at = gts + gdur;
    std::string gname = comm     ? nccl_kernel(nd.name)
                        : memcpy ? std::string("Memcpy DtoD (Device -> Device)")
                                 : "void opforge::synthetic_kernel<" + std::string(nd.name) + ">(float*)";
    std::string args = "\"External id\": " + ext + ", \"device\": 0, \"stream\": " + std::to_string(stream) +
                       ", \"correlation\": " + std::to_string(c);
    if (comm) args += ", \"Process Group Name\": \"0\"";
    w.event(std::string("\"ph\": \"X\", \"cat\": ") + (memcpy ? "\"gpu_memcpy\"" : "\"kernel\"") +
            ", \"name\": " + str(gname) + ", \"pid\": 0, \"tid\": " + std::to_string(stream) + ", \"ts\": " + us(gts) +
            ", \"dur\": " + us(gdur) + ", \"args\": {" + args + "}");
    w.event("\"ph\": \"s\", \"id\": " + std::to_string(c) + ", \"pid\": 1000, \"tid\": " + tid +
            ", \"ts\": " + us(lts) + ", \"cat\": \"ac2g\", \"name\": \"ac2g\"");
    w.event("\"ph\": \"f\", \"id\": " + std::to_string(c) + ", \"pid\": 0, \"tid\": " + std::to_string(stream) +
            ", \"ts\": " + us(gts) + ", \"cat\": \"ac2g\", \"name\": \"ac2g\", \"bp\": \"e\"");
    ++st.gpu_ops;
    // two draws, sequenced (the operands of one `+` may be evaluated in either order)
    const double gap = uni(0.2, 1.0);
    clock += ldur + gap + uni(1.0, 6.0);
  }

  // ops in id order; an op's event is written once the next op on its thread is not its descendant
  void replay_ops(const HostTree& t, const std::vector<uint8_t>& cuda) {
    std::vector<std::vector<std::pair<uint32_t, double>>> stacks(st.threads);  // open node, its ts
    for (uint32_t r = 0; r < t.order.size(); ++r) {
      const uint32_t i = t.order[r];
      if (t.root[i] || !h.nodes[i].has_rf_id) continue;
      auto& stack = stacks[thread[i]];
      while (!stack.empty() && int32_t(stack.back().first) != t.parent[i]) {
        close_cpu_op(stack.back().first, stack.back().second);
        stack.pop_back();
      }
      const double ts = clock;
      clock += uni(0.5, 3.0);
      stack.emplace_back(i, ts);
      const auto& nd = h.nodes[i];
      const bool comm = nd.name.find("nccl:") != std::string_view::npos ||
                        nd.name.find("record_param_comms") != std::string_view::npos;
      if (t.has_child[i] || !(cuda[i] || comm)) {
        if (!t.has_child[i]) clock += uni(1.0, 10.0);
        continue;
      }
      launch_gpu_op(i, comm);
    }
    for (auto& stack : stacks)
      while (!stack.empty()) {
        close_cpu_op(stack.back().first, stack.back().second);
        stack.pop_back();
      }
  }
};

// the profiler step annotation spans all ops
void write_trace_footer(Writer& w, double clock) {
  w.event(
      "\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"ProfilerStep#0\", \"pid\": 1000, \"tid\": 4242, "
      "\"ts\": " +
      us(kT0 + 50) + ", \"dur\": " + us(clock + 10 - (kT0 + 50)) + ", \"args\": {\"External id\": 0}");
  w.buf += "\n], \"traceName\": \"synthetic\", \"displayTimeUnit\": \"ms\"}\n";
}

}  // namespace

SynthStats synth_kineto(const std::string& host_path, const std::string& out_path, uint64_t seed) {
  HostEtIndex h = index_host_et(host_path);
  SynthStats st;
  const HostTree tree = index_host_tree(h);
  const NodeThreads nt = assign_threads(h, host_path, tree.root);
  st.threads = nt.count;

  AtomicOutput out(out_path);
  Writer w{out, {}};
  write_trace_header(w, st.threads);
  OpReplay replay(h, nt.thread, w, st, seed);
  replay.replay_ops(tree, nt.cuda);
  write_trace_footer(w, replay.clock);
  out.write(w.buf);
  out.commit();
  return st;
}

}  // namespace opf::chakra
