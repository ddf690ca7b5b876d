// Text the way the reference text converter's Python sees it: a file opened in text mode
// (strict UTF-8, universal newlines), `str.split()` on Unicode whitespace, `int()` on a token.
// Needed for byte identity in --compat reference; the default reader uses the same tokens but
// stricter numbers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace opf::chakra {

// A number as Python's int() reads it: sign and magnitude, `huge` beyond 64 bits. The
// reference fails on a value only when protobuf refuses it for the field it is stored in, so
// compat mode checks ranges where a value is used, not where it is read.
struct PyInt {
  bool negative = false;
  bool huge = false;
  uint64_t magnitude = 0;
  std::string token;

  bool fits_u64() const { return !huge && (!negative || magnitude == 0); }
  bool fits_i64() const {
    return !huge && (negative ? magnitude <= (uint64_t(1) << 63) : magnitude < (uint64_t(1) << 63));
  }
  int64_t as_i64() const { return negative ? int64_t(0 - magnitude) : int64_t(magnitude); }
};

namespace py {

// "\r\n" and lone "\r" become "\n" (what read() returns in text mode).
std::string universal_newlines(std::string_view bytes);

// Byte offset of the first byte CPython's strict UTF-8 decoder rejects, or npos.
size_t invalid_utf8_at(std::string_view s);

// Lines of universal-newline text, without their "\n" (a final "\n" ends the last line; it
// does not start an empty one), as `for line in f` yields them.
std::vector<std::string_view> lines(std::string_view text);

// str.split() with no argument: runs of whitespace (ASCII and Unicode, as str.isspace())
// separate tokens. str.strip() is implied.
std::vector<std::string_view> split(std::string_view line);

// int(token): optional sign, ASCII digits with single underscores between them. False where
// int() raises ValueError (non-ASCII digits, which int() also accepts, are refused here).
bool parse_int(std::string_view token, PyInt& out);

}  // namespace py
}  // namespace opf::chakra
