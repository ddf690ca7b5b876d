// Sequential reader of a file that may be gzip-compressed (detected by the 1f 8b magic, as the
// reference readers do). Streaming, so memory does not grow with the file; multi-member gzip
// (e.g. `cat a.gz b.gz`) is read as one stream. Errors are InputError naming the file and the
// compressed byte offset.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <string>
#include <vector>

namespace opf::chakra {

class ByteSource {
 public:
  explicit ByteSource(std::string path);
  ~ByteSource();
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  // Fills up to `cap` bytes of decompressed data; returns 0 only at the end of the data.
  size_t read(char* dst, size_t cap);
  const std::string& path() const { return path_; }
  bool gzipped() const { return gz_; }
  uint64_t bytes_out() const { return out_total_; }  // decompressed bytes delivered so far

 private:
  bool refill();  // more raw bytes into in_; false at EOF

  std::string path_;
  int fd_ = -1;
  bool gz_ = false;
  bool raw_eof_ = false;
  bool stream_end_ = false;  // current gzip member finished
  std::vector<unsigned char> in_;
  size_t in_pos_ = 0, in_len_ = 0;
  uint64_t raw_offset_ = 0;  // raw bytes consumed from the file before in_
  uint64_t out_total_ = 0;
  z_stream zs_{};
  bool zs_init_ = false;
};

// Whole (decompressed) content; for small inputs only (.et records are read in full anyway).
std::string read_all(const std::string& path);

}  // namespace opf::chakra
