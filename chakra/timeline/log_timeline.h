// `opforge chakra timeline --log LOG --npus N --npu-frequency MHZ -o OUT.json`: an ASTRA-sim
// issue/callback log as a Chrome trace, one `X` event per callback (from its issue), in
// callback order, pid = NPU, tid = kind of node (1 local memory, 2 remote memory, 3 compute,
// 4 communication).
//
// compat_reference: the bytes of the MLCommons timeline visualizer (mlcommons/chakra @ 21585d8,
// src/timeline_visualizer): its reader (astra_log.h), times in ms although Chrome's format means
// µs, Python json.dump layout; where it fails (callback without issue, NPU id out of range,
// a name of no known kind) this fails too.
// Default: times in µs; thread names; the name is the rest of the line; events whose partner
// is missing (callback without issue, issue without callback, an issue repeated before its
// callback) are left out and reported by `warn`, one line per kind with the first example;
// a node of no known kind goes to thread 5 ("other").
// Both: bad lines and options are one-line errors ("LOG:LINE: problem"); nothing is written then.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace opf::chakra {

struct LogTimelineOptions {
  int64_t npus = 0;
  int64_t npu_frequency_mhz = 0;
  bool compat_reference = false;
  std::function<void(const std::string&)> warn;  // default: stderr
};

struct LogTimelineStats {
  size_t events = 0;
  size_t issues_without_callback = 0, callbacks_without_issue = 0, repeated_issues = 0;
};

LogTimelineStats log_timeline(const std::string& log, const std::string& out_path, const LogTimelineOptions& opt);

}  // namespace opf::chakra
