#include "ref_log.h"

#include <cerrno>
#include <cstring>

#include "input_error.h"

namespace opf::chakra {

RefLog::RefLog(const std::string& path) {
  if (path.empty()) return;
  f_ = std::fopen(path.c_str(), "w");
  if (!f_) throw InputError(path, "", std::string("cannot open log file: ") + std::strerror(errno));
  static char buf[1 << 16];
  (void)buf;
  std::setvbuf(f_, nullptr, _IOFBF, 1 << 16);
}

RefLog::~RefLog() {
  if (f_) std::fclose(f_);
}

void RefLog::line(const char* level, const std::string& msg) {
  if (!f_) return;
  std::time_t t = std::time(nullptr);
  if (t != stamp_time_) {
    stamp_time_ = t;
    std::tm tm{};
    localtime_r(&t, &tm);
    std::strftime(stamp_, sizeof stamp_, "%m/%d/%Y %I:%M:%S %p", &tm);
  }
  std::fprintf(f_, "%s [%s] %s\n", level, stamp_, msg.c_str());
}

}  // namespace opf::chakra
