// CPython `str()`/`repr()` of JSON values, as the reference converter writes them into IOInfo
// strings (docs/chakra.md §3.6): lists "[a, b]", dicts "{'k': v}", True/False/None, ints as
// their decimal text (arbitrary precision: digits beyond 64 bits are kept verbatim), floats in
// Python's shortest round-trip repr ("1e-05", "1e+16", "1.0", "inf"), strings with Python's
// quote choice and escapes. Known approximation: code points that CPython deems unprintable
// only because they are unassigned in its Unicode database are kept as UTF-8.
#pragma once

#include <simdjson.h>

#include <string>
#include <string_view>

namespace opf::chakra {

void py_repr_double(double d, std::string& out);
void py_repr_string(std::string_view utf8, std::string& out);  // quoted, escaped

// Appends repr(value) (str(value) when `top_level` is true: a top-level string is unquoted).
// Errors (invalid number, bad string, ...) are returned as simdjson error codes.
simdjson::error_code py_repr_json(simdjson::ondemand::value v, std::string& out, bool top_level = false);

}  // namespace opf::chakra
