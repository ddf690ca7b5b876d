// One error type for everything user-facing: what() is a single line that names the thing
// (file, op, lock, ...) and the problem.
#pragma once

#include <stdexcept>
#include <string>

namespace opf {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace opf
