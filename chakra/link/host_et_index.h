// A host execution trace kept as its JSON text plus a compact per-node index (id, parent,
// rf_id, name, and where the node's object sits in the text). The linker needs only the index
// to match nodes, and re-emits each node from its own text, so the output carries every field
// of the input exactly as Python's json module would re-serialise it. All host ET schemas are
// indexed: 1.0.1 (flat "parent" and "rf_id") and the nested "-chakra" ones ("ctrl_deps",
// rf_id among "attrs").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "padded_input.h"
#include "string_pool.h"

namespace opf::chakra {

enum class ParentKind : uint8_t { absent, null, integer, other };

struct HostNodeIndex {
  int64_t id = 0;
  int64_t parent = 0;
  int64_t rf_id = 0;
  int64_t tid = 0;     // the host "tid" attribute (flat field in 1.0.1), 0 when absent
  uint64_t begin = 0;  // byte range of the node object in the text
  uint32_t length = 0;
  ParentKind parent_kind = ParentKind::absent;
  bool has_rf_id = false;
  bool flat_schema = false;  // 1.0.1 layout: parent key is "parent"
  std::string_view name;
};

struct HostEtIndex {
  std::string path;
  PaddedInput text;
  std::string schema;
  std::vector<HostNodeIndex> nodes;                                 // file order
  std::vector<std::pair<std::string, std::string_view>> top_level;  // key, raw value text ("nodes": empty)
  StringPool pool;
};

// Throws InputError (file, node number / byte offset, problem): not JSON, truncated, no
// "nodes" array, a node without an integer "id", duplicate node ids, integers beyond 64 bits.
HostEtIndex index_host_et(const std::string& path);

}  // namespace opf::chakra
