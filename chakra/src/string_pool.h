// Append-only storage for the text the stages keep per node (names, IOInfo strings): one
// allocation per 1 MiB block instead of one per string, views stay valid for the pool's life,
// and repeated strings (op names, schemas, type lists) can be interned so they are stored once.
#pragma once

#include <cstring>
#include <memory>
#include <string_view>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace opf::chakra {

// 8-byte handle of a pooled string (length-prefixed), half the size of a string_view: the
// per-node text references are a large share of the graph's memory.
class PStr {
 public:
  PStr() = default;
  explicit PStr(const char* p) : p_(p) {}
  std::string_view view() const {
    if (!p_) return {};
    uint32_t n;
    std::memcpy(&n, p_, 4);
    return {p_ + 4, n};
  }
  operator std::string_view() const { return view(); }
  const char* data() const { return view().data(); }
  size_t size() const { return view().size(); }
  bool empty() const { return size() == 0; }
  size_t find(std::string_view s) const { return view().find(s); }
  friend bool operator==(PStr a, std::string_view b) { return a.view() == b; }

 private:
  const char* p_ = nullptr;
};

class StringPool {
 public:
  std::string_view add(std::string_view s) {
    if (s.empty()) return {};
    char* p = alloc(s.size());
    std::memcpy(p, s.data(), s.size());
    return {p, s.size()};
  }
  std::string_view intern(std::string_view s) {
    auto it = interned_.find(s);
    if (it != interned_.end()) return *it;
    auto v = add(s);
    interned_.insert(v);
    return v;
  }
  // length-prefixed copies for PStr handles (empty strings need no storage)
  PStr add_p(std::string_view s) {
    if (s.empty()) return {};
    char* p = alloc(4 + s.size());
    uint32_t n = uint32_t(s.size());
    std::memcpy(p, &n, 4);
    std::memcpy(p + 4, s.data(), s.size());
    return PStr(p);
  }
  PStr intern_p(std::string_view s) {
    if (s.empty()) return {};
    auto it = interned_p_.find(s);
    if (it != interned_p_.end()) return PStr(it->second);
    PStr p = add_p(s);
    interned_p_.emplace(p.view(), p.view().data() - 4);
    return p;
  }

 private:
  char* alloc(size_t n) {
    if (n > kBlock / 4) {  // big strings get their own block
      big_.emplace_back(new char[n]);
      return big_.back().get();
    }
    if (used_ + n > kBlock || blocks_.empty()) {
      blocks_.emplace_back(new char[kBlock]);
      used_ = 0;
    }
    char* p = blocks_.back().get() + used_;
    used_ += n;
    return p;
  }

  static constexpr size_t kBlock = 1 << 18;
  std::vector<std::unique_ptr<char[]>> blocks_, big_;
  size_t used_ = 0;
  std::unordered_set<std::string_view> interned_;
  std::unordered_map<std::string_view, const char*> interned_p_;
};

}  // namespace opf::chakra
