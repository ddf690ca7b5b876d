#include "matrix/meson_options.h"

#include <toml++/toml.h>

#include <algorithm>

#include "matrix/process.h"
#include "opforge/error.h"
#include "matrix/toml_error.h"

namespace opf::matrix {

bool MesonOption::feature() const {
  if (type != "combo" || choices.size() != 3) return false;
  auto has = [&](const char* c) { return std::find(choices.begin(), choices.end(), c) != choices.end(); };
  return has("enabled") && has("disabled") && has("auto");
}

const MesonOption* OptionCatalog::find(const std::string& name) const {
  for (const auto& o : options)
    if (o.name == name) return &o;
  return nullptr;
}

std::string literal_from_json(const json::Value& v) {
  if (v.is_bool()) return v.as_bool() ? "true" : "false";
  if (v.is_number()) return std::to_string(v.as_int());
  if (v.is_array()) {
    std::string s = "[";
    for (size_t i = 0; i < v.as_array().size(); ++i) {
      if (i) s += ", ";
      s += literal_from_json(v.as_array()[i]);
    }
    return s + "]";
  }
  std::string s = "'";
  for (char c : v.as_string()) {
    if (c == '\'' || c == '\\') s += '\\';
    s += c;
  }
  return s + "'";
}

std::string display_literal(const std::string& literal) {
  std::string out;
  for (char c : literal)
    if (c != '\'') out += c;
  return out;
}

OptionCatalog OptionCatalog::from_json(const json::Value& doc, const std::string& origin) {
  if (!doc.is_array()) throw Error(origin + ": expected the JSON array of `meson introspect --buildoptions`");
  OptionCatalog cat;
  for (const auto& o : doc.as_array()) {
    MesonOption m;
    m.name = o.str("name");
    m.type = o.str("type");
    m.section = o.str("section");
    for (const auto& c : o.get("choices").as_array()) m.choices.push_back(c.as_string());
    m.default_literal = literal_from_json(o.get("value"));
    if (m.name.empty()) throw Error(origin + ": option entry without a name");
    cat.options.push_back(std::move(m));
  }
  return cat;
}

OptionCatalog OptionCatalog::introspect(const std::string& source_dir) {
  std::string out;
  std::string mb = source_dir + "/meson.build";
  if (!proc::capture({"meson", "introspect", mb, "--buildoptions"}, out, source_dir, 120)) {
    // meson prints its own "file:line:col: ERROR: ..." on stdout
    auto p = out.find("ERROR");
    std::string why = p == std::string::npos ? "run it by hand to see why" : out.substr(out.rfind('\n', p) + 1);
    why = why.substr(0, why.find('\n'));
    throw Error(mb + ": `meson introspect --buildoptions` failed: " + why);
  }
  return from_json(json::parse(out, "meson introspect " + mb), "meson introspect " + mb);
}

std::vector<std::string> OpManifest::backends() const {
  std::vector<std::string> out;
  for (const auto& op : ops)
    for (const auto& b : op.backends)
      if (std::find(out.begin(), out.end(), b) == out.end()) out.push_back(b);
  return out;
}

OpManifest OpManifest::read(const std::string& path) {
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw_toml_error(path, e);
  }
  OpManifest m;
  auto* ops = t["op"].as_table();
  if (!ops) throw Error(path + ":1: no [op.<name>] tables");
  for (auto& [name, node] : *ops) {
    OpEntry e{std::string(name.str()), {}};
    if (auto* arr = node.as_table() ? (*node.as_table())["backends"].as_array() : nullptr)
      for (auto& b : *arr)
        if (auto s = b.value<std::string>()) e.backends.push_back(*s);
    m.ops.push_back(std::move(e));
  }
  return m;
}

}  // namespace opf::matrix
