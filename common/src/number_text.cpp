#include "common/number_text.h"

#include <cstdio>
#include <cstdlib>

namespace opf {

std::string shortest_double(double v, int min_digits) {
  char b[40] = "";
  for (int p = min_digits; p <= 17; ++p) {
    std::snprintf(b, sizeof b, "%.*g", p, v);
    if (std::strtod(b, nullptr) == v) break;
  }
  return b;
}

}  // namespace opf
