#include "op/params.h"

#include <cerrno>
#include <cstdlib>

#include "op/text.h"
#include "opforge/error.h"

namespace opf::cli {
namespace {

double parse_value(const ParamInfo& p, const std::string& text) {
  const std::string head = "param '" + p.name + "' = '" + text + "' ";
  switch (p.type) {
    case ParamType::boolean:
      if (text == "true" || text == "1") return 1;
      if (text == "false" || text == "0") return 0;
      throw Error(head + "is not a bool (true, false, 1, 0)");
    case ParamType::enumeration:
      for (size_t i = 0; i < p.choices.size(); ++i)
        if (p.choices[i] == text) return double(i);
      throw Error(head + "is not one of its choices (" + join(p.choices) + ")");
    case ParamType::f64:
    case ParamType::i64: {
      char* end = nullptr;
      errno = 0;
      const double v = text.empty() ? 0 : std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0') throw Error(head + "is not a number");
      if (errno == ERANGE && (v > 1 || v < -1)) throw Error(head + "is out of the range of a double");
      return v;
    }
  }
  throw Error(head + "has an unknown type");
}

}  // namespace

std::pair<std::string, std::string> split_assignment(const std::string& spec, const std::string& option) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0) throw Error(option + " '" + spec + "': expected NAME=VALUE");
  return {spec.substr(0, eq), spec.substr(eq + 1)};
}

Params parse_params(const OpInfo& op, const std::vector<std::string>& specs) {
  Params params = op.default_params();
  std::vector<std::string> seen;
  for (const std::string& spec : specs) {
    const auto [name, text] = split_assignment(spec, "--param");
    const ParamInfo* p = op.find_param(name);
    if (!p) {
      std::vector<std::string> names;
      for (const ParamInfo& q : op.params) names.push_back(q.name);
      throw Error("op '" + op.name + "' has no param '" + name +
                  "' (params: " + (names.empty() ? "none" : join(names)) + ")");
    }
    for (const auto& s : seen)
      if (s == name) throw Error("param '" + name + "' is given twice");
    seen.push_back(name);
    const double v = parse_value(*p, text);
    if (const std::string why = p->check(v); !why.empty()) throw Error("param '" + name + "' = " + text + " " + why);
    params.set(name, v);
  }
  return params;
}

}  // namespace opf::cli
