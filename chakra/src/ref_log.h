// The reference converter's debug log (docs/chakra.md §3.11): "LEVEL [MM/DD/YYYY hh:mm:ss AM] message"
// lines, written only when a log file is requested (it costs ~180 bytes per node).
#pragma once

#include <cstdio>
#include <ctime>
#include <string>

namespace opf::chakra {

class RefLog {
 public:
  RefLog() = default;
  explicit RefLog(const std::string& path);
  ~RefLog();
  RefLog(const RefLog&) = delete;
  RefLog& operator=(const RefLog&) = delete;

  bool enabled() const { return f_ != nullptr; }
  void debug(const std::string& msg) { line("DEBUG", msg); }
  void info(const std::string& msg) { line("INFO", msg); }
  void warning(const std::string& msg) { line("WARNING", msg); }
  void line_error(const std::string& msg) { line("ERROR", msg); }

 private:
  void line(const char* level, const std::string& msg);
  FILE* f_ = nullptr;
  std::time_t stamp_time_ = 0;
  char stamp_[40] = {};
};

}  // namespace opf::chakra
