// `opforge op --param NAME=VALUE`: text to typed param values (f64/i64 numbers, bool
// true/false/1/0, enum by choice name), validated against the manifest with ParamInfo::check.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "opforge/manifest.h"

namespace opf::cli {

// "NAME=VALUE" -> {NAME, VALUE}; throws opf::Error naming `option` when there is no '=' or no NAME.
std::pair<std::string, std::string> split_assignment(const std::string& spec, const std::string& option);

// The op's defaults with each spec applied; throws opf::Error (one line naming the param) for an
// unknown name, a value given twice, text that is not a value of the param's type, or a value
// outside its range.
Params parse_params(const OpInfo& op, const std::vector<std::string>& specs);

}  // namespace opf::cli
