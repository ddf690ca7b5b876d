// The current time in UTC for records and run names.
#pragma once

#include <string>

namespace opf {

std::string utc_timestamp();          // ISO 8601, e.g. 2026-12-02T21:04:05Z (records)
std::string utc_compact_timestamp();  // e.g. 20261202T210405Z (directory and file names)

}  // namespace opf
