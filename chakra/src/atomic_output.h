// Output file that appears only when complete: bytes go to a temp file in the destination's
// directory (common's TempFile: same filesystem, so rename is atomic) and commit() renames it
// over the target. Streaming, gzip and preallocation are chakra's (its outputs are large); no
// fsync, as before.
// If commit() is never reached (error, exception) the temp file is removed and an existing
// target is left untouched. A name ending in ".gz" is written gzip-compressed (like the
// reference C++ writer).
#pragma once

#include <zlib.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "common/temp_file.h"

namespace opf::chakra {

class AtomicOutput {
 public:
  explicit AtomicOutput(std::string path);
  ~AtomicOutput();  // discards unless committed
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;

  void write(std::string_view bytes);
  // Completes the temp file (flush, trim, close) without publishing it, so outputs that must
  // appear together (one file per NPU) are all finished before the first is committed, with
  // one descriptor open at a time. commit() finishes first if needed.
  void finish();
  void commit();
  const std::string& path() const { return path_; }

 private:
  void flush_buffer();
  void write_raw(const char* p, size_t n);

  std::string path_;
  files::TempFile tmp_;
  bool finished_ = false;
  bool gzip_ = false;
  z_stream zs_{};
  std::string buf_;
  uint64_t written_ = 0, reserved_ = 0;  // file bytes written / preallocated (fallocate)
};

}  // namespace opf::chakra
