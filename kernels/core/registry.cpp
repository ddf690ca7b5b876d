#include <algorithm>

#include "opforge/error.h"
#include "opforge/manifest.h"
#include "ops_table.h"

namespace opf {

std::optional<DType> dtype_from_name(std::string_view name) {
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::f64, DType::u8, DType::i64})
    if (dtype_name(d) == name) return d;
  return std::nullopt;
}

double Params::get(std::string_view name) const {
  for (const auto& [k, v] : values)
    if (k == name) return v;
  throw Error("parameter '" + std::string(name) + "' is not declared in the op's manifest params");
}

bool OpInfo::has_backend(std::string_view b) const {
  return std::find(enabled_backends.begin(), enabled_backends.end(), b) != enabled_backends.end();
}

bool OpInfo::is_prebuilt(std::string_view b) const {
  return std::find(prebuilt_backends.begin(), prebuilt_backends.end(), b) != prebuilt_backends.end();
}

const std::vector<OpInfo>& op_table() {
  static const std::vector<OpInfo> table = generated::make_op_table();
  return table;
}

const OpInfo* find_op(std::string_view name) {
  for (const auto& op : op_table())
    if (op.name == name) return &op;
  return nullptr;
}

}  // namespace opf
