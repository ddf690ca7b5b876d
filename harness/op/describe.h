// `opforge op OP --describe`: the op's manifest contract as JSON (entries with their arguments,
// typed params with defaults and ranges), so callers can build `opforge op` invocations, or ABI
// calls, without reading manifest.toml.
#pragma once

#include <string>

#include "opforge/manifest.h"

namespace opf::cli {

std::string describe_json(const OpInfo& op);

}  // namespace opf::cli
