// toml++'s parse errors, as opforge's one-line errors: "FILE:LINE:COLUMN: problem". toml++ quotes
// the offending input in its description, and that may hold a newline or any control byte
// (found by fuzz_matrix_toml), so those are written as \xNN; so are names quoted from the file in
// opforge's own messages (a constraint name holding a newline, found by the long fuzz run).
#pragma once

#include <toml++/toml.h>

#include <cstdio>
#include <string>
#include <string_view>

#include "opforge/error.h"

namespace opf::matrix {

// Text quoted from a user's file, fit for a one-line message: control bytes as \xNN.
inline std::string one_line(std::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += char(c);
    }
  }
  return out;
}

[[noreturn]] inline void throw_toml_error(const std::string& path, const toml::parse_error& e) {
  const auto& at = e.source().begin;
  throw Error(path + ":" + std::to_string(at.line) + ":" + std::to_string(at.column) + ": " +
              one_line(e.description()));
}

}  // namespace opf::matrix
