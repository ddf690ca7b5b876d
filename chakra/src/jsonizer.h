// .et -> JSON in the reference jsonizer's layout (docs/chakra.md §2.3): protobuf's Python MessageToJson
// (indent 2, lowerCamelCase names, 64-bit integers as strings, enums by name, defaults
// omitted, ASCII-only output) for GlobalMetadata and every Node, concatenated with no
// separator. Written atomically.
#pragma once

#include <string>

#include "proto/et_def.pb.h"

namespace opf::chakra {

void append_message_json(const google::protobuf::Message& m, std::string& out);
void jsonize(const std::string& in_et, const std::string& out_json, bool compat_reference);

}  // namespace opf::chakra
