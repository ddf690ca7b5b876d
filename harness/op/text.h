// Small text helpers shared by the parts of `opforge op`.
#pragma once

#include <string>
#include <vector>

namespace opf::cli {

// "a, b, c": the lists error messages name (ops, entries, dtypes, choices).
inline std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace opf::cli
