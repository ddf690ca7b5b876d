// Protobuf wire-format primitives for encoding the tiny Chakra Node schema directly: building
// a Node message per record (allocations, ByteSizeLong, destructor) cost 3x the bytes' worth.
// Sizes are computed first, so each record is written once, front to back, with no scratch.
// The output must stay byte-identical to protobuf's (fields in number order, proto3 defaults
// skipped, packed repeated scalars): the reference .et tests and the goldens check it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace opf::chakra::wire {

inline size_t varint_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) v >>= 7, ++n;
  return n;
}

inline char* put_varint(char* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = char((v & 0x7f) | 0x80);
    v >>= 7;
  }
  *p++ = char(v);
  return p;
}

// tag = (field << 3) | wire type; all Chakra field numbers fit in two bytes
constexpr uint32_t tag(uint32_t field, uint32_t type) { return (field << 3) | type; }
constexpr uint32_t kVarint = 0, kLen = 2;

// length-delimited field of `len` payload bytes, header included
inline size_t len_field_size(uint32_t t, size_t len) { return varint_size(t) + varint_size(len) + len; }

inline char* put_len_header(char* p, uint32_t t, size_t len) { return put_varint(put_varint(p, t), len); }

inline char* put_bytes(char* p, uint32_t t, std::string_view s) {
  p = put_len_header(p, t, s.size());
  if (!s.empty()) std::memcpy(p, s.data(), s.size());  // an empty view's data() may be null: UB for memcpy
  return p + s.size();
}

}  // namespace opf::chakra::wire
