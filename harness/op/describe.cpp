#include "op/describe.h"

#include <cmath>

#include "matrix/json.h"

namespace opf::cli {
namespace {

json::Value strings(const std::vector<std::string>& v) {
  json::Value a = json::Array{};
  for (const auto& s : v) a.push(s);
  return a;
}

// JSON has no infinity: an unbounded side is null
json::Value bound(double v) { return std::isfinite(v) ? json::Value(v) : json::Value(nullptr); }

json::Value arg_json(const ArgInfo& a) {
  json::Value o;
  o.set("name", a.name);
  o.set("role", role_name(a.role));
  o.set("dtype", a.dtype_text());
  o.set("list", a.list);
  o.set("view", a.view);
  o.set("shape", a.shape);
  return o;
}

json::Value param_json(const ParamInfo& p) {
  json::Value o;
  o.set("name", p.name);
  o.set("type", param_type_name(p.type));
  o.set("default", p.format(p.def));
  json::Value r;
  r.set("min", bound(p.min));
  r.set("min_open", p.min_open);
  r.set("max", bound(p.max));
  r.set("max_open", p.max_open);
  o.set("range", r);
  o.set("choices", strings(p.choices));
  o.set("doc", p.doc);
  return o;
}

}  // namespace

std::string describe_json(const OpInfo& op) {
  json::Value o;
  o.set("op", op.name);
  o.set("summary", op.summary);
  o.set("dtypes", strings(op.dtypes));
  o.set("backends", strings(op.enabled_backends));
  json::Value entries = json::Array{};
  for (const EntryInfo& e : op.entries) {
    json::Value ej;
    ej.set("name", e.name);
    json::Value args = json::Array{};
    for (const ArgInfo& a : e.args) args.push(arg_json(a));
    ej.set("args", args);
    entries.push(ej);
  }
  o.set("entries", entries);
  json::Value params = json::Array{};
  for (const ParamInfo& p : op.params) params.push(param_json(p));
  o.set("params", params);
  return json::dump(o) + "\n";
}

}  // namespace opf::cli
