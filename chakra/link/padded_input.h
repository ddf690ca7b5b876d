// Whole decompressed content of a (possibly gzip) file, with the zero padding simdjson needs
// after the last byte, read through the common gzip-transparent ByteSource.
#pragma once

#include <string>

namespace opf::chakra {

struct PaddedInput {
  std::string buf;  // size() == length + padding
  size_t length = 0;
  const char* data() const { return buf.data(); }
};

PaddedInput read_padded(const std::string& path);

}  // namespace opf::chakra
