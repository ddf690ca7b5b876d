#include "common/utc_time.h"

#include <ctime>

namespace opf {
namespace {

std::string utc_now(const char* format) {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

}  // namespace

std::string utc_timestamp() { return utc_now("%Y-%m-%dT%H:%M:%SZ"); }
std::string utc_compact_timestamp() { return utc_now("%Y%m%dT%H%M%SZ"); }

}  // namespace opf
