// Shared by the libFuzzer targets: the readers under test take a path (they stream, or detect
// gzip), so each input is written to one scratch file per process. An opf::Error is the expected
// answer to bad input, but only as ONE line naming the file: anything else (another exception, a
// multi-line message, a sanitizer report) is a finding.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "opforge/error.h"

namespace opf::fuzz {

// The scratch path: in $TMPDIR (tmpfs in CI containers), unique per process, removed at exit.
inline const std::string& scratch_path(const char* suffix) {
  static const std::string path = [&] {
    const char* dir = std::getenv("TMPDIR");
    std::string p = std::string(dir && *dir ? dir : "/tmp") + "/opforge-fuzz-" + std::to_string(::getpid()) + suffix;
    std::atexit([] { std::remove(scratch_path("").c_str()); });
    return p;
  }();
  return path;
}

inline const std::string& write_scratch(const uint8_t* data, size_t size, const char* suffix = "") {
  const std::string& path = scratch_path(suffix);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

// A reader's error must be one line that names where the input came from.
inline void check_error(const opf::Error& e, std::string_view origin) {
  const std::string_view what = e.what();
  if (what.find('\n') != std::string_view::npos || what.find(origin) == std::string_view::npos) {
    std::fprintf(stderr, "reader error is not one line naming %.*s: %s\n", int(origin.size()), origin.data(), e.what());
    std::abort();
  }
}

}  // namespace opf::fuzz
