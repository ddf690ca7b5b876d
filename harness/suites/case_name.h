// Names shared by tests, benchmarks and results: `<op>/<backend>/<dtype>/<entry>/<shape>`, shape
// dims joined by 'x' (e.g. layer_norm/cpu/f16/backward/32x1024). Peers: `peer/<lib>/<op>/...`.
#pragma once

#include <string>
#include <string_view>

#include "opforge/manifest.h"

namespace opf::suites {

inline std::string shape_name(const Shape& s) {
  std::string r;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += 'x';
    r += std::to_string(s[i]);
  }
  return r;
}

inline std::string case_name(std::string_view op, std::string_view backend, std::string_view dtype,
                             std::string_view entry, const Shape& shape) {
  std::string r;
  for (std::string_view part : {op, backend, dtype, entry}) (r += part) += '/';
  return r + shape_name(shape);
}

inline std::string peer_case_name(std::string_view lib, std::string_view op, std::string_view dtype,
                                  std::string_view entry, const Shape& shape) {
  std::string r = "peer/";
  for (std::string_view part : {lib, op, dtype, entry}) (r += part) += '/';
  return r + shape_name(shape);
}

}  // namespace opf::suites
