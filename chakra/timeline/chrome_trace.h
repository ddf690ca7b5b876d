// Chrome-trace / Perfetto JSON ("traceEvents" array): complete (`X`) events plus the metadata
// events that name processes and threads. Times are µs, as the format defines them. Written
// one event per line, so that two timelines diff line by line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace opf::chakra {

class ChromeTrace {
 public:
  ChromeTrace();
  void process_name(int64_t pid, std::string_view name);
  void thread_name(int64_t pid, int64_t tid, std::string_view name);
  // `args` is the inside of the args object, already JSON ("\"id\": 3"), or empty.
  void complete(int64_t pid, int64_t tid, double ts_us, double dur_us, std::string_view name, std::string_view args);
  // The finished JSON text; the writer is spent afterwards.
  std::string take();

 private:
  void begin_event();
  std::string out_;
  bool first_ = true;
};

// A JSON number for a time: integral values without a fraction ("300"), others in Python's
// shortest round-trip form ("0.3", "1e-05"), which JSON accepts.
void json_time(double v, std::string& out);

}  // namespace opf::chakra
