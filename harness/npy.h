// NumPy .npy files (format versions 1.0, 2.0 and 3.0), read and written strictly, for
// `opforge op`. Its own small library (opf_npy) so a fuzzer can link the parser alone.
//
// Supported descr: <f4 <f8 <f2 <i8 <i4 |u1 |b1 (bool, read as u8 holding 0 or 1). NumPy has no
// bfloat16; callers that need it convert to/from f32 themselves. Rejected with one line naming
// the file, the byte offset and the field: big-endian data, fortran_order True, unknown descr,
// a malformed header dict, a shape whose size overflows, data shorter or longer than the shape.
// Little-endian hosts only (checked at compile time): the data bytes are used as they are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "opforge/dtype.h"

namespace opf::npy {

struct Array {
  DType dtype = DType::f32;     // f32, f64, f16, i64, i32 or u8
  bool boolean = false;         // u8 read from / written as '|b1'
  std::vector<int64_t> shape;   // () is a scalar: one element
  std::vector<std::byte> data;  // numel() * dtype_size(dtype) bytes, C order, little-endian

  int64_t numel() const;
};

// The descr this array is written with: "<f4", "|b1", ... Throws opf::Error for bf16.
std::string descr(const Array& a);

// Parses a whole .npy file held in memory; origin names it in errors:
//   "<origin>: byte <offset>: <what>" (offset of the offending byte or field).
Array parse(std::string_view bytes, const std::string& origin);
// Reads and parses path; errors name the path (unreadable: the OS reason).
Array read(const std::string& path);

// The .npy bytes of a: version 1.0 (2.0 when the header needs more than 65535 bytes), '<' descr,
// C order, header padded with spaces and one '\n' so the data starts at a multiple of 64.
std::string serialize(const Array& a);
// Writes serialize(a) to a temp file next to path, then renames it over path: a reader never
// sees a partial file. Throws opf::Error naming path.
void write(const std::string& path, const Array& a);

}  // namespace opf::npy
