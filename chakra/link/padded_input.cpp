#include "padded_input.h"

#include <simdjson.h>
#include <sys/stat.h>

#include "byte_source.h"

namespace opf::chakra {

PaddedInput read_padded(const std::string& path) {
  ByteSource src(path);
  PaddedInput in;
  struct stat st {};
  size_t hint = ::stat(path.c_str(), &st) == 0 ? size_t(st.st_size) : 0;
  if (src.gzipped()) hint *= 8;
  size_t cap = std::max<size_t>(hint + (1 << 16), 1 << 20);
  in.buf.resize(cap);
  size_t len = 0;
  for (;;) {
    if (in.buf.size() - len < (1 << 16)) in.buf.resize(in.buf.size() * 2);
    size_t n = src.read(in.buf.data() + len, in.buf.size() - len);
    if (n == 0) break;
    len += n;
  }
  in.length = len;
  in.buf.resize(len + simdjson::SIMDJSON_PADDING, '\0');
  return in;
}

}  // namespace opf::chakra
