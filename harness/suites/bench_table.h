// Console reporter that also collects every run and prints a short summary at the end:
// name, GB/s, % of the bandwidth probe, GFLOP/s and our speed relative to each peer.
#pragma once

#include <benchmark/benchmark.h>

#include <map>
#include <string>
#include <vector>

namespace opf::suites {

class TableReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override;
  void print_table(std::FILE* out) const;

 private:
  struct Row {
    double bytes_per_second = 0, bw_frac = 0, flops = 0;
    std::string error;
    bool from_median = false;
  };
  std::vector<std::string> order_;
  std::map<std::string, Row> rows_;
  double cpu_share_min_ = 1;  // lowest cpu_time / real_time seen (single-threaded work: ~1 when idle)
};

}  // namespace opf::suites
