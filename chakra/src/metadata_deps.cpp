#include "metadata_deps.h"

#include <algorithm>
#include <unordered_map>

namespace opf::chakra {

size_t bypass_metadata_data_deps(std::vector<EtNode>& graph, const std::vector<bool>& is_metadata) {
  std::unordered_map<uint64_t, size_t> meta_pos;  // METADATA nodes are few: index only them
  for (size_t k = 0; k < graph.size(); ++k)
    if (is_metadata[k]) meta_pos.emplace(graph[k].id, k);
  if (meta_pos.empty()) return 0;

  // Non-METADATA ancestors of each METADATA node through METADATA-only paths, memoised.
  // Iterative (chains of METADATA nodes could be long in a synthetic trace).
  enum State : uint8_t { kTodo, kActive, kDone };
  std::unordered_map<size_t, State> state;
  std::unordered_map<size_t, std::vector<uint64_t>> resolved;
  auto append_unique = [](std::vector<uint64_t>& v, uint64_t id) {
    if (std::find(v.begin(), v.end(), id) == v.end()) v.push_back(id);
  };
  auto resolve = [&](size_t root) -> const std::vector<uint64_t>& {
    std::vector<size_t> stack{root};
    while (!stack.empty()) {
      const size_t m = stack.back();
      State& s = state[m];
      if (s == kDone) {
        stack.pop_back();
        continue;
      }
      if (s == kTodo) {
        s = kActive;
        for (uint64_t d : graph[m].data_deps)
          if (auto it = meta_pos.find(d); it != meta_pos.end() && state[it->second] == kTodo)
            stack.push_back(it->second);
        continue;
      }
      // kActive and every METADATA parent is done (or on the stack: a cycle, contributes nothing)
      std::vector<uint64_t> r;
      for (uint64_t d : graph[m].data_deps) {
        auto it = meta_pos.find(d);
        if (it == meta_pos.end()) append_unique(r, d);
        else if (state[it->second] == kDone)
          for (uint64_t p : resolved[it->second]) append_unique(r, p);
      }
      resolved[m] = std::move(r);
      state[m] = kDone;
      stack.pop_back();
    }
    return resolved[root];
  };

  size_t changed = 0;
  for (size_t k = 0; k < graph.size(); ++k) {
    if (is_metadata[k]) continue;
    std::vector<uint64_t>& deps = graph[k].data_deps;
    if (std::none_of(deps.begin(), deps.end(), [&](uint64_t d) { return meta_pos.count(d) != 0; })) continue;
    std::vector<uint64_t> out;
    for (uint64_t d : deps) {
      auto it = meta_pos.find(d);
      if (it == meta_pos.end()) append_unique(out, d);
      else
        for (uint64_t p : resolve(it->second)) append_unique(out, p);
    }
    deps = std::move(out);
    ++changed;
  }
  return changed;
}

}  // namespace opf::chakra
