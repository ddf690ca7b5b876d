#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/number_text.h"
#include "opforge/error.h"
#include "opforge/manifest.h"
#include "ops_table.h"

namespace opf {

std::optional<DType> dtype_from_name(std::string_view name) {
  for (int d = 0; d < OPF_DTYPE_COUNT; ++d)
    if (dtype_name(DType(d)) == name) return DType(d);
  return std::nullopt;
}

std::string_view param_type_name(ParamType t) {
  switch (t) {
    case ParamType::f64: return "f64";
    case ParamType::i64: return "i64";
    case ParamType::boolean: return "bool";
    case ParamType::enumeration: return "enum";
  }
  return "?";
}

std::string_view role_name(Role r) {
  switch (r) {
    case Role::in: return "in";
    case Role::out: return "out";
    case Role::inout: return "inout";
  }
  return "?";
}

std::string ParamInfo::format(double v) const {
  switch (type) {
    case ParamType::boolean: return v != 0 ? "true" : "false";
    case ParamType::enumeration: {
      const auto i = size_t(v);
      return v >= 0 && i < choices.size() ? choices[i] : shortest_double(v);
    }
    case ParamType::i64: return std::to_string((long long)v);
    case ParamType::f64: return shortest_double(v);
  }
  return shortest_double(v);
}

std::string ParamInfo::check(double v) const {
  if (std::isnan(v)) return "is NaN";
  switch (type) {
    case ParamType::boolean: return v == 0 || v == 1 ? "" : "must be true or false";
    case ParamType::enumeration:
      return v >= 0 && v == std::floor(v) && size_t(v) < choices.size() ? "" : "is not one of its choices";
    case ParamType::i64:
      if (v != std::floor(v) || std::fabs(v) > 0x1p53) return "must be an integer";
      break;
    case ParamType::f64: break;
  }
  if (min_open ? !(v > min) : !(v >= min)) return std::string("must be ") + (min_open ? "> " : ">= ") + format(min);
  if (max_open ? !(v < max) : !(v <= max)) return std::string("must be ") + (max_open ? "< " : "<= ") + format(max);
  return "";
}

bool ParamInfo::splits_jit(std::string_view entry) const {
  return std::find(jit_variant.begin(), jit_variant.end(), entry) != jit_variant.end();
}

int64_t ParamInfo::jit_variant_of(double v) const {
  if (type == ParamType::enumeration) return v >= 0 && v < double(choices.size()) ? int64_t(v) : 0;
  if (!jit_values.empty()) return std::find(jit_values.begin(), jit_values.end(), v) - jit_values.begin();
  return v != 0 ? 1 : 0;  // bool; f64/i64 without jit_values: zero or not (a NaN is not zero)
}

void ParamInfo::append_jit_variant(std::string* variant, int64_t k) const {
  *variant += (variant->empty() ? "" : ",") + name + "=" + std::to_string(k);
}

std::vector<std::string> OpInfo::jit_variants(std::string_view entry) const {
  std::vector<std::string> out{""};
  for (const ParamInfo& p : params) {
    if (!p.splits_jit(entry)) continue;
    std::vector<std::string> next;
    for (const std::string& v : out)
      for (int k = 0; k < p.jit_variant_count(); ++k) p.append_jit_variant(&next.emplace_back(v), k);
    out = std::move(next);
  }
  return out;
}

double Params::get(std::string_view name) const {
  for (const auto& [k, v] : values)
    if (k == name) return v;
  throw Error("parameter '" + std::string(name) + "' is not declared in the op's manifest params");
}

void Params::set(std::string_view name, double v) {
  for (auto& [k, val] : values)
    if (k == name) {
      val = v;
      return;
    }
  throw Error("parameter '" + std::string(name) + "' is not declared in the op's manifest params");
}

DType ArgInfo::dtype_for(DType storage) const {
  switch (rule) {
    case DTypeRule::storage: return storage;
    case DTypeRule::acc: return storage == DType::f64 ? DType::f64 : DType::f32;
    case DTypeRule::fixed: return fixed;
  }
  return storage;
}

std::string ArgInfo::dtype_text() const {
  switch (rule) {
    case DTypeRule::storage: return "T";
    case DTypeRule::acc: return "acc";
    case DTypeRule::fixed: return std::string(dtype_name(fixed));
  }
  return "?";
}

const ArgInfo* EntryInfo::find(std::string_view arg) const {
  for (const ArgInfo& a : args)
    if (a.name == arg) return &a;
  return nullptr;
}

ArgDesc& CaseDesc::set(std::string_view name, Shape shape, Fill fill, bool derived) {
  for (ArgDesc& a : args)
    if (a.name == name) {
      if (a.list_index >= 0) throw Error("argument '" + std::string(name) + "' is a list: describe it with set_list");
      a.shape = std::move(shape);
      a.fill = fill;
      a.derived = derived;
      a.set = true;
      return a;
    }
  throw Error("describe(): '" + std::string(name) + "' is not an argument of entry '" + entry + "'");
}

void CaseDesc::set_list(std::string_view name, const std::vector<Shape>& shapes, Fill fill, bool derived) {
  auto first = std::find_if(args.begin(), args.end(), [&](const ArgDesc& a) { return a.name == name; });
  if (first == args.end())
    throw Error("describe(): '" + std::string(name) + "' is not an argument of entry '" + entry + "'");
  if (first->list_index < 0) throw Error("argument '" + std::string(name) + "' is not a list: describe it with set");
  ArgDesc proto = *first;
  auto last = std::find_if(first, args.end(), [&](const ArgDesc& a) { return a.name != name; });
  const auto at = args.erase(first, last) - args.begin();
  std::vector<ArgDesc> elems;
  for (size_t k = 0; k < shapes.size(); ++k) {
    ArgDesc e = proto;
    e.shape = shapes[k];
    e.fill = fill;
    e.derived = derived;
    e.list_index = int(k);
    e.set = true;
    elems.push_back(std::move(e));
  }
  args.insert(args.begin() + at, elems.begin(), elems.end());
}

const ArgDesc& CaseDesc::arg(std::string_view name) const {
  for (const ArgDesc& a : args)
    if (a.name == name) return a;
  throw Error("case of entry '" + entry + "' has no argument '" + std::string(name) + "'");
}

RefArg& ref_arg(std::vector<RefArg>& args, std::string_view name) {
  for (RefArg& a : args)
    if (a.desc->name == name && a.desc->list_index < 0) return a;
  throw Error("reference: no tensor argument '" + std::string(name) + "'");
}

std::span<RefArg> ref_list(std::vector<RefArg>& args, std::string_view name) {
  auto first = std::find_if(args.begin(), args.end(), [&](const RefArg& a) { return a.desc->name == name; });
  auto last = std::find_if(first, args.end(), [&](const RefArg& a) { return a.desc->name != name; });
  return std::span<RefArg>(args.data() + (first - args.begin()), size_t(last - first));
}

bool OpInfo::has_backend(std::string_view b) const {
  return std::find(enabled_backends.begin(), enabled_backends.end(), b) != enabled_backends.end();
}

bool OpInfo::is_prebuilt(std::string_view b) const {
  return std::find(prebuilt_backends.begin(), prebuilt_backends.end(), b) != prebuilt_backends.end();
}

const EntryInfo* OpInfo::find_entry(std::string_view entry) const {
  for (const EntryInfo& e : entries)
    if (e.name == entry) return &e;
  return nullptr;
}

const ParamInfo* OpInfo::find_param(std::string_view n) const {
  for (const ParamInfo& p : params)
    if (p.name == n) return &p;
  return nullptr;
}

const std::vector<std::string>& OpInfo::deps_of(std::string_view backend) const {
  static const std::vector<std::string> none;
  for (const auto& [b, libs] : deps)
    if (b == backend) return libs;
  return none;
}

Params OpInfo::default_params() const {
  Params p;
  for (const ParamInfo& i : params) p.values.emplace_back(i.name, i.def);
  return p;
}

CaseDesc describe_case(const OpInfo& op, std::string_view entry, DType dtype, const Shape& shape, const Params& p) {
  const EntryInfo* e = op.find_entry(entry);
  if (!e) throw Error("op '" + op.name + "' has no entry '" + std::string(entry) + "'");
  CaseDesc c;
  c.entry = e->name;
  c.dtype = dtype;
  for (const ArgInfo& a : e->args) {
    ArgDesc d;
    d.name = a.name;
    d.role = a.role;
    d.dtype = a.dtype_for(dtype);
    d.list_index = a.list ? 0 : -1;
    c.args.push_back(std::move(d));
  }
  op.spec->describe(c, shape, p);
  if (!c.unsupported.empty()) return c;
  for (const ArgDesc& a : c.args)
    if (!a.set)
      throw Error("ref.cpp of op '" + op.name + "': describe() gave argument '" + a.name + "' of entry '" + c.entry +
                  "' no shape");
  return c;
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
