// The one error type of the Chakra stages: what() is a single line "FILE: WHERE: PROBLEM"
// (WHERE = byte offset, node id, record number, ...). Derives from opf::Error so the CLI's
// top-level handler prints it and exits non-zero.
#pragma once

#include <string>
#include <string_view>

#include "opforge/error.h"

namespace opf::chakra {

class InputError : public opf::Error {
 public:
  InputError(std::string_view file, std::string_view where, std::string_view problem)
      : opf::Error(compose(file, where, problem)) {}

 private:
  static std::string compose(std::string_view file, std::string_view where, std::string_view problem) {
    std::string s(file);
    if (!where.empty()) s.append(": ").append(where);
    s.append(": ").append(problem);
    // one line, whatever the problem text carried
    for (char& c : s)
      if (c == '\n' || c == '\r') c = ' ';
    return s;
  }
};

}  // namespace opf::chakra
