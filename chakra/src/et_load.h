// An .et file as the validator/simulator see it: GlobalMetadata plus the dependency view of
// every node in file order (is_cpu_op, stream and tid taken from the attributes).
#pragma once

#include <string>
#include <vector>

#include "et_graph.h"
#include "proto/et_def.pb.h"
#include "string_pool.h"

namespace opf::chakra {

struct LoadedEt {
  ChakraProtoMsg::GlobalMetadata meta;
  std::vector<EtNode> nodes;
  StringPool pool;
  std::vector<std::string> type_problems;  // nodes whose type is not a NodeType value
};

// Throws InputError on unreadable / truncated / unparsable records or an empty stream.
void load_et(const std::string& path, bool compat_reference, LoadedEt& out);

}  // namespace opf::chakra
