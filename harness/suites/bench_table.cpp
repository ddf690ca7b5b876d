#include "bench_table.h"

#include "peers/peer.h"

#include <algorithm>
#include <cstdio>

namespace opf::suites {
namespace {

double counter(const benchmark::BenchmarkReporter::Run& r, const char* name) {
  auto it = r.counters.find(name);
  return it == r.counters.end() ? 0.0 : double(it->second);
}

}  // namespace

void TableReporter::ReportRuns(const std::vector<Run>& runs) {
  ConsoleReporter::ReportRuns(runs);
  for (const Run& r : runs) {
    const bool median = r.run_type == Run::RT_Aggregate;
    if (median && r.aggregate_name != "median") continue;
    // the registered name, without the "/real_time" that UseRealTime() appends
    const std::string& name = r.run_name.function_name;
    auto [it, fresh] = rows_.try_emplace(name);
    if (fresh) order_.push_back(name);
    Row& row = it->second;
    if (row.from_median && !median) continue;  // repetitions: the median wins over single runs
    row.from_median = median;
    // GPU benchmarks legitimately sleep in synchronize(): only host work says the machine is busy
    const bool host_work =
        name.rfind("probe/", 0) == 0 || name.rfind("peer/", 0) == 0 || name.find("/cpu/") != std::string::npos;
    if (host_work && !median && !r.error_occurred && r.real_accumulated_time > 0)
      cpu_share_min_ = std::min(cpu_share_min_, r.cpu_accumulated_time / r.real_accumulated_time);
    row.error = r.error_occurred ? r.error_message : "";
    row.bytes_per_second = counter(r, "bytes_per_second");
    row.bw_frac = counter(r, "bw_frac");
    row.flops = counter(r, "FLOP/s");
  }
}

void TableReporter::print_table(std::FILE* out) const {
  if (order_.empty()) return;
  if (cpu_share_min_ < 0.8)
    std::fprintf(out,
                 "\nwarning: a benchmark got only %.0f%% of a CPU (cpu_time / real_time): the machine is busy, "
                 "rates and bw_frac are unreliable\n",
                 100 * cpu_share_min_);
  std::fprintf(out, "\n%-52s %9s %8s %9s  %s\n", "name", "GB/s", "%probe", "GFLOP/s", "vs peer (our speed / peer's)");
  for (const std::string& name : order_) {
    const Row& r = rows_.at(name);
    if (!r.error.empty()) {
      std::fprintf(out, "%-52s error: %s\n", name.c_str(), r.error.c_str());
      continue;
    }
    std::string peers;
    if (name.rfind("peer/", 0) != 0 && name.rfind("probe/", 0) != 0) {
      // ours: <op>/<backend>/<rest>; a peer of it: peer/<lib>/<op>/<rest>
      const size_t op_end = name.find('/'), backend_end = name.find('/', op_end + 1);
      const std::string op = name.substr(0, op_end), rest = name.substr(backend_end + 1);
      const std::string backend = name.substr(op_end + 1, backend_end - op_end - 1);
      for (const auto& [pname, prow] : rows_) {
        if (pname.rfind("peer/", 0) != 0) continue;
        const size_t lib_end = pname.find('/', 5);
        if (pname.compare(lib_end + 1, std::string::npos, op + "/" + rest) != 0) continue;
        // a peer is compared with our kernels on the device it runs on (peer.h: Adapter::backend)
        const peers::Adapter* a = peers::find_adapter(pname.substr(5, lib_end - 5), op);
        if ((a && !a->backend.empty() ? a->backend : std::string("cpu")) != backend) continue;
        if (!prow.error.empty() || prow.bytes_per_second <= 0) continue;
        char buf[96];
        std::snprintf(buf, sizeof buf, "%s%.2fx %s", peers.empty() ? "" : ", ",
                      r.bytes_per_second / prow.bytes_per_second, pname.substr(5, lib_end - 5).c_str());
        peers += buf;
      }
    }
    char frac[16] = "";
    if (r.bw_frac > 0) std::snprintf(frac, sizeof frac, "%.1f%%", 100 * r.bw_frac);
    char flops[16] = "";
    if (r.flops > 0) std::snprintf(flops, sizeof flops, "%.2f", r.flops / 1e9);
    std::fprintf(out, "%-52s %9.2f %8s %9s  %s\n", name.c_str(), r.bytes_per_second / 1e9, frac, flops, peers.c_str());
  }
}

}  // namespace opf::suites
