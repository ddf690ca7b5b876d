// id -> position map for node ids. Trace ids are almost always dense small integers, so a
// plain vector indexed by id is used when max id < 4 x count (8 bytes per slot instead of a
// node-allocating hash map: less memory, no per-entry malloc); a hash map otherwise.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace opf::chakra {

class IdIndex {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  // ids[i] -> i; returns false (and keeps the first) on a duplicate id, reporting it in *dup_pos
  template <class GetId>
  bool build(size_t n, GetId get_id, size_t* dup_pos = nullptr, size_t* first_pos = nullptr) {
    uint64_t max_id = 0;
    for (size_t i = 0; i < n; ++i) max_id = std::max<uint64_t>(max_id, uint64_t(get_id(i)));
    dense_ = n > 0 && max_id < 4 * uint64_t(n) + 1024;
    bool ok = true;
    if (dense_) {
      vec_.assign(size_t(max_id) + 1, kNone);
      for (size_t i = 0; i < n; ++i) {
        uint32_t& slot = vec_[size_t(get_id(i))];
        if (slot != kNone) {
          if (ok && dup_pos) *dup_pos = i, *first_pos = slot;
          ok = false;
          continue;
        }
        slot = uint32_t(i);
      }
    } else {
      map_.reserve(n);
      for (size_t i = 0; i < n; ++i) {
        auto [it, fresh] = map_.emplace(uint64_t(get_id(i)), uint32_t(i));
        if (!fresh) {
          if (ok && dup_pos) *dup_pos = i, *first_pos = it->second;
          ok = false;
        }
      }
    }
    return ok;
  }

  uint32_t find(uint64_t id) const {
    if (dense_) return id < vec_.size() ? vec_[size_t(id)] : kNone;
    auto it = map_.find(id);
    return it == map_.end() ? kNone : it->second;
  }

 private:
  bool dense_ = true;
  std::vector<uint32_t> vec_;
  std::unordered_map<uint64_t, uint32_t> map_;
};

}  // namespace opf::chakra
