#include "kineto_synth.h"

#include <simdjson.h>

#include <cmath>
#include <random>
#include <unordered_map>

#include "atomic_output.h"
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
  py_json_string(s, o);
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

}  // namespace

SynthStats synth_kineto(const std::string& host_path, const std::string& out_path, uint64_t seed) {
  HostEtIndex h = index_host_et(host_path);
  SynthStats st;
  std::mt19937_64 rng(seed);
  auto uni = [&](double a, double b) { return std::uniform_real_distribution<double>(a, b)(rng); };

  const size_t n = h.nodes.size();
  std::unordered_map<int64_t, uint32_t> by_id;
  by_id.reserve(n * 2);
  for (uint32_t i = 0; i < n; ++i) by_id.emplace(h.nodes[i].id, i);
  std::vector<uint32_t> order(n);
  for (uint32_t i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return h.nodes[a].id < h.nodes[b].id; });
  std::vector<uint8_t> root(n), has_child(n);
  std::vector<int32_t> parent(n, -1);
  for (uint32_t i = 0; i < n; ++i) root[i] = is_et_root_name(h.nodes[i].name);
  for (uint32_t i = 0; i < n; ++i) {
    const auto& nd = h.nodes[i];
    if (nd.parent_kind != ParentKind::integer) continue;
    auto it = by_id.find(nd.parent);
    if (it == by_id.end() || it->second == i || root[it->second]) continue;
    parent[i] = int32_t(it->second);
    has_child[it->second] = 1;
  }

  // host "tid" attribute of each node -> Kineto thread
  dom::parser parser;
  std::unordered_map<int64_t, uint32_t> thread_of_tid;
  std::vector<uint32_t> thread(n, 0);
  std::vector<uint8_t> cuda(n, 0);
  for (uint32_t i = 0; i < n; ++i) {
    const auto& nd = h.nodes[i];
    if (root[i]) continue;
    std::string_view text(h.text.data() + nd.begin, nd.length);
    cuda[i] = text.find("cuda") != std::string_view::npos;
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
    thread[i] = it->second;
  }
  st.threads = thread_of_tid.size();

  AtomicOutput out(out_path);
  Writer w{out, {}};
  w.buf =
      "{\"schemaVersion\": 1, \"deviceProperties\": [{\"id\": 0, \"name\": \"SYNTHETIC GPU\"}], "
      "\"distributedInfo\": {\"backend\": \"nccl\", \"rank\": 0, \"world_size\": 2}, \"traceEvents\": [\n";
  const double t0 = 1700000000000.0;
  const int64_t pid = 1000;
  w.event("\"name\": \"process_name\", \"ph\": \"M\", \"ts\": " + us(t0) +
          ", \"pid\": 1000, \"tid\": 0, \"args\": {\"name\": \"python3\"}");
  for (size_t t = 0; t < st.threads; ++t)
    w.event("\"name\": \"thread_name\", \"ph\": \"M\", \"ts\": " + us(t0) + ", \"pid\": 1000, \"tid\": " +
            std::to_string(4242 + t) + ", \"args\": {\"name\": \"thread " + std::to_string(4242 + t) + "\"}");

  double clock = t0 + 100;
  std::vector<std::vector<std::pair<uint32_t, double>>> stacks(st.threads);  // open node, its ts
  int64_t ev_idx = 0, corr = 100;
  std::unordered_map<int, double> stream_free;
  auto close = [&](uint32_t i, double ts) {
    const auto& nd = h.nodes[i];
    const bool annotation = nd.name.size() > 2 && nd.name.substr(0, 2) == "##";
    std::string body = "\"ph\": \"X\", \"cat\": ";
    body += annotation ? "\"user_annotation\"" : "\"cpu_op\"";
    body += ", \"name\": " + str(nd.name) + ", \"pid\": " + std::to_string(pid) +
            ", \"tid\": " + std::to_string(4242 + thread[i]) + ", \"ts\": " + us(ts) + ", \"dur\": " + us(clock - ts) +
            ", \"args\": {\"External id\": " + std::to_string(nd.rf_id) +
            ", \"Record function id\": " + std::to_string(nd.rf_id) + ", \"Ev Idx\": " + std::to_string(ev_idx++) + "}";
    w.event(body);
    ++st.cpu_ops;
    clock += uni(0.2, 1.0);
  };
  for (uint32_t r = 0; r < n; ++r) {
    const uint32_t i = order[r];
    if (root[i] || !h.nodes[i].has_rf_id) continue;
    auto& stack = stacks[thread[i]];
    while (!stack.empty() && int32_t(stack.back().first) != parent[i]) {
      close(stack.back().first, stack.back().second);
      stack.pop_back();
    }
    const double ts = clock;
    clock += uni(0.5, 3.0);
    stack.emplace_back(i, ts);
    const auto& nd = h.nodes[i];
    const bool comm =
        nd.name.find("nccl:") != std::string_view::npos || nd.name.find("record_param_comms") != std::string_view::npos;
    if (has_child[i] || !(cuda[i] || comm)) {
      if (!has_child[i]) clock += uni(1.0, 10.0);
      continue;
    }
    // a leaf that touches CUDA tensors launches one GPU op
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
    clock += ldur + uni(0.2, 1.0) + uni(1.0, 6.0);
  }
  for (auto& stack : stacks)
    while (!stack.empty()) {
      close(stack.back().first, stack.back().second);
      stack.pop_back();
    }
  w.event(
      "\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"ProfilerStep#0\", \"pid\": 1000, \"tid\": 4242, "
      "\"ts\": " +
      us(t0 + 50) + ", \"dur\": " + us(clock + 10 - (t0 + 50)) + ", \"args\": {\"External id\": 0}");
  w.buf += "\n], \"traceName\": \"synthetic\", \"displayTimeUnit\": \"ms\"}\n";
  out.write(w.buf);
  out.commit();
  return st;
}

}  // namespace opf::chakra
