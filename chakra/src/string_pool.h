// Append-only storage for the text the stages keep per node (names, IOInfo strings): one
// allocation per 1 MiB block instead of one per string, views stay valid for the pool's life,
// and repeated strings (op names, schemas, type lists) can be interned so they are stored once.
#pragma once

#include <cstring>
#include <memory>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace opf::chakra {

class StringPool {
 public:
  std::string_view add(std::string_view s) {
    if (s.empty()) return {};
    if (s.size() > kBlock / 4) {   // big strings get their own block
      big_.emplace_back(new char[s.size()]);
      std::memcpy(big_.back().get(), s.data(), s.size());
      return {big_.back().get(), s.size()};
    }
    if (used_ + s.size() > kBlock || blocks_.empty()) {
      blocks_.emplace_back(new char[kBlock]);
      used_ = 0;
    }
    char* p = blocks_.back().get() + used_;
    std::memcpy(p, s.data(), s.size());
    used_ += s.size();
    return {p, s.size()};
  }
  std::string_view intern(std::string_view s) {
    auto it = interned_.find(s);
    if (it != interned_.end()) return *it;
    auto v = add(s);
    interned_.insert(v);
    return v;
  }

 private:
  static constexpr size_t kBlock = 1 << 20;
  std::vector<std::unique_ptr<char[]>> blocks_, big_;
  size_t used_ = 0;
  std::unordered_set<std::string_view> interned_;
};

}  // namespace opf::chakra
