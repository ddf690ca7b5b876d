#include "sim_timeline.h"

#include <map>
#include <tuple>

#include "atomic_output.h"
#include "chrome_trace.h"
#include "input_error.h"
#include "proto/et_def.pb.h"
#include "simulator.h"

namespace opf::chakra {

namespace {

bool is_comm(int type) {
  return type == ChakraProtoMsg::COMM_SEND_NODE || type == ChakraProtoMsg::COMM_RECV_NODE ||
         type == ChakraProtoMsg::COMM_COLL_NODE;
}

void add_rank(const RankGraph& r, ChromeTrace& ct) {
  const std::vector<EtNode>& nodes = r.et->nodes;
  ct.process_name(r.rank, "rank " + std::to_string(r.rank) + " (" + r.path + ")");
  constexpr int64_t kCpuTid = 0;
  bool cpu_named = false;
  // GPU threads: (comm?, has_stream, stream) -> tid, numbered in order of first use
  std::map<std::tuple<bool, bool, int64_t>, int64_t> gpu_tid;
  simulate(
      nodes, [](const std::string&) {},
      [&](uint32_t i, uint64_t start, uint64_t end) {
        const EtNode& n = nodes[i];
        int64_t tid = kCpuTid;
        if (n.is_cpu) {
          if (!cpu_named) ct.thread_name(r.rank, kCpuTid, "CPU ops");
          cpu_named = true;
        } else {
          const bool comm = is_comm(n.type);
          auto key = std::make_tuple(comm, n.has_stream, n.has_stream ? n.stream : 0);
          auto [it, fresh] = gpu_tid.emplace(key, int64_t(gpu_tid.size()) + 1);
          tid = it->second;
          if (fresh)
            ct.thread_name(r.rank, tid,
                           std::string(comm ? "GPU comm" : "GPU compute") + ", stream " +
                               (n.has_stream ? std::to_string(n.stream) : std::string("none")));
        }
        std::string args = "\"id\": " + std::to_string(n.id) + ", \"duration_micros\": " + std::to_string(n.duration);
        ct.complete(r.rank, tid, double(start), double(end - start), n.name, args);
      });
}

}  // namespace

int64_t rank_of_path(const std::string& path, int64_t fallback) {
  std::string p = path;
  for (const char* ext : {".gz", ".et"}) {
    const std::string e(ext);
    if (p.size() > e.size() && p.compare(p.size() - e.size(), e.size(), e) == 0) p.resize(p.size() - e.size());
    else if (e == ".et") return fallback;
  }
  const size_t dot = p.rfind('.');
  if (dot == std::string::npos || dot + 1 == p.size() || p.size() - dot > 10) return fallback;
  int64_t v = 0;
  for (size_t k = dot + 1; k < p.size(); ++k) {
    if (p[k] < '0' || p[k] > '9') return fallback;
    v = v * 10 + (p[k] - '0');
  }
  return v;
}

void write_sim_timeline(const std::vector<RankGraph>& ranks, const std::string& out_path) {
  std::map<int64_t, const std::string*> seen;
  for (const RankGraph& r : ranks)
    if (auto [it, fresh] = seen.emplace(r.rank, &r.path); !fresh)
      throw InputError(r.path, "",
                       "rank " + std::to_string(r.rank) + " again (also " + *it->second +
                           "): one file per rank, named PREFIX.<rank>.et");
  ChromeTrace ct;
  for (const RankGraph& r : ranks) add_rank(r, ct);
  AtomicOutput out(out_path);
  out.write(ct.take());
  out.commit();
}

}  // namespace opf::chakra
