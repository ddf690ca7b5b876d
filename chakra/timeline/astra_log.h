// ASTRA-sim's workload issue/callback log (Workload.cc's cout lines, `develop` branch):
//   issue,sys->id=<npu>,tick=<cycle>,node->id=<id>,node->name=<name>
//   callback,sys->id=<npu>,tick=<cycle>,node->id=<id>,node->name=<name>
// read into event records. Two readers: the reference timeline visualizer's (any line that
// contains "issue" or "callback" is an event, columns by position, the name cut at '='), and
// opforge's (an event starts with "issue," or "callback," at the line start or after a blank —
// so spdlog-prefixed lines work —, columns by key, the name is the rest of the line).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace opf::chakra {

struct LogEvent {
  bool callback = false;  // false: issue
  int64_t npu = 0, tick = 0, node = 0;
  std::string name;
  size_t line = 0;  // 1-based
};

// Throw InputError("LOG:LINE", ...) on a line they cannot read; nothing else is checked here.
std::vector<LogEvent> read_astra_log_reference(const std::string& path);
std::vector<LogEvent> read_astra_log(const std::string& path);

// Thread (tid) of a node by its name, as the reference classifies it: 1 local memory, 2 remote
// memory, 3 compute, 4 communication; 0 when none applies (the reference fails there).
int timeline_tid(const std::string& name);

}  // namespace opf::chakra
