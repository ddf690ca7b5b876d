// toml++'s parse errors, as opforge's one-line errors: "FILE:LINE:COLUMN: problem". toml++ quotes
// the offending input in its description, and that may hold a newline or any control byte
// (found by fuzz_matrix_toml), so those are written as \xNN.
#pragma once

#include <toml++/toml.h>

#include <cstdio>
#include <string>

#include "opforge/error.h"

namespace opf::matrix {

[[noreturn]] inline void throw_toml_error(const std::string& path, const toml::parse_error& e) {
  const auto& at = e.source().begin;
  std::string msg = path + ":" + std::to_string(at.line) + ":" + std::to_string(at.column) + ": ";
  for (unsigned char c : e.description()) {
    if (c < 0x20 || c == 0x7f) {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      msg += hex;
    } else {
      msg += char(c);
    }
  }
  throw Error(msg);
}

}  // namespace opf::matrix
