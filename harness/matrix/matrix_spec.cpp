#include "matrix/matrix_spec.h"

#include <toml++/toml.h>

#include <algorithm>
#include <set>

#include "common/files.h"
#include "opforge/error.h"
#include "matrix/toml_error.h"

namespace opf::matrix {
namespace {

struct Ctx {
  const std::string& path;
  const OptionCatalog& catalog;
  const OpManifest& manifest;

  std::string at(const toml::node& n) const {
    const auto& s = n.source().begin;
    return path + ":" + std::to_string(s.line) + ":" + std::to_string(s.column);
  }
  // msg may quote names from the file: one_line keeps the error on one line whatever they hold
  [[noreturn]] void fail(const toml::node& n, const std::string& msg) const {
    throw Error(at(n) + ": " + one_line(msg));
  }

  // "@ops" -> every op option, "@backends" -> every declared backend's option, else the name.
  std::vector<std::string> expand(const std::string& key, const toml::node& where) const {
    std::vector<std::string> names;
    if (key == "@ops") {
      for (const auto& op : manifest.ops) names.push_back(op.name);
    } else if (key == "@backends") {
      names = manifest.backends();
    } else if (!key.empty() && key[0] == '@') {
      fail(where, "unknown option group '" + key + "' (known: @ops, @backends)");
    } else {
      names.push_back(key);
    }
    for (const auto& n : names)
      if (!catalog.find(n))
        fail(where,
             "'" + n + "' is not a Meson option of this project (see `meson introspect meson.build --buildoptions`)");
    return names;
  }

  std::string literal(const toml::node& v, const MesonOption& opt) const {
    auto quote = [](const std::string& s) { return literal_from_json(json::Value(s)); };
    if (opt.type == "boolean") {
      if (auto b = v.value_exact<bool>()) return *b ? "true" : "false";
      fail(v, "option '" + opt.name + "' is boolean: use true or false");
    }
    if (opt.type == "integer") {
      if (auto i = v.value_exact<int64_t>()) return std::to_string(*i);
      fail(v, "option '" + opt.name + "' is an integer");
    }
    if (opt.type == "array") {
      auto* arr = v.as_array();
      if (!arr) fail(v, "option '" + opt.name + "' is an array: use [\"a\", \"b\"]");
      std::string s = "[";
      for (size_t i = 0; i < arr->size(); ++i) {
        auto e = (*arr)[i].value_exact<std::string>();
        if (!e) fail((*arr)[i], "option '" + opt.name + "': array elements must be strings");
        if (!opt.choices.empty() && std::find(opt.choices.begin(), opt.choices.end(), *e) == opt.choices.end())
          fail((*arr)[i], "option '" + opt.name + "': '" + *e + "' is not one of its choices");
        s += (i ? ", " : "") + quote(*e);
      }
      return s + "]";
    }
    auto s = v.value_exact<std::string>();
    if (!s) fail(v, "option '" + opt.name + "' takes a string");
    if (opt.type == "combo" && std::find(opt.choices.begin(), opt.choices.end(), *s) == opt.choices.end()) {
      std::string c;
      for (const auto& x : opt.choices) c += (c.empty() ? "" : ", ") + x;
      fail(v, "option '" + opt.name + "': '" + *s + "' is not one of its choices (" + c + ")");
    }
    return quote(*s);
  }

  Options options(const toml::node& n) const {
    auto* t = n.as_table();
    if (!t) fail(n, "expected a table of Meson options");
    Options out;
    for (auto&& [k, v] : *t)
      for (const auto& name : expand(std::string(k.str()), v)) out[name] = literal(v, *catalog.find(name));
    return out;
  }

  void only_keys(const toml::table& t, std::initializer_list<const char*> allowed, const char* what) const {
    for (auto&& [k, v] : t) {
      bool ok = false;
      for (auto a : allowed) ok = ok || k.str() == a;
      if (!ok) fail(v, std::string("unknown key '") + std::string(k.str()) + "' in " + what);
    }
  }

  std::string str(const toml::table& t, const char* key, const char* what, bool required) const {
    auto* n = t.get(key);
    if (!n) {
      if (required) fail(t, std::string(what) + " needs '" + key + "'");
      return "";
    }
    auto s = n->value_exact<std::string>();
    if (!s || s->empty()) fail(*n, std::string("'") + key + "' must be a non-empty string");
    return *s;
  }

  const toml::array& array_of_tables(const toml::node& n, const char* key) const {
    auto* a = n.as_array();
    if (!a || !a->is_array_of_tables()) fail(n, std::string("'") + key + "' must be written [[" + key + "]]");
    return *a;
  }
};

std::string line_of(const std::string& path, const toml::node& n) {
  return path + ":" + std::to_string(n.source().begin.line);
}

toml::table parse_toml(const std::string& text, const std::string& path) {
  try {
    return toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    throw_toml_error(path, e);
  }
}

// The top-level keys, schema, description and base options.
void read_header(const Ctx& c, const toml::table& doc, MatrixSpec& m) {
  c.only_keys(doc, {"schema", "description", "base", "axis", "generate", "exclude", "cell", "run"}, "the matrix file");
  if (auto* s = doc.get("schema")) {
    if (s->value_exact<int64_t>().value_or(0) != 1) c.fail(*s, "unsupported schema (this opforge reads schema = 1)");
  }
  if (doc.get("description")) m.description = c.str(doc, "description", "", false);
  if (auto* b = doc.get("base")) m.base = c.options(*b);
}

// Explicit values, else every choice of a combo, else both booleans.
std::vector<std::string> axis_literals(const Ctx& c, const toml::table& t, const toml::node& node,
                                       const std::string& name, const MesonOption& opt) {
  std::vector<std::string> literals;
  if (auto* vals = t.get("values")) {
    auto* arr = vals->as_array();
    if (!arr || arr->empty()) c.fail(*vals, "'values' must be a non-empty array");
    for (auto& v : *arr) literals.push_back(c.literal(v, opt));
  } else if (opt.type == "combo") {
    for (const auto& ch : opt.choices) literals.push_back(literal_from_json(json::Value(ch)));
  } else if (opt.type == "boolean") {
    literals = {"true", "false"};
  } else {
    c.fail(node, "axis '" + name + "' (" + opt.type + ") needs explicit 'values'");
  }
  return literals;
}

void read_axes(const Ctx& c, const toml::node& axes, MatrixSpec& m) {
  std::set<std::string> seen;
  for (auto& node : c.array_of_tables(axes, "axis")) {
    auto& t = *node.as_table();
    c.only_keys(t, {"option", "select", "values"}, "[[axis]]");
    std::string key = t.get("select") ? c.str(t, "select", "[[axis]]", true)
                                      : c.str(t, "option", "[[axis]] (option or select)", true);
    for (const auto& name : c.expand(key, node)) {
      if (!seen.insert(name).second) continue;  // a group and an explicit axis may overlap
      Axis ax{name, axis_literals(c, t, node, name, *c.catalog.find(name))};
      if (m.base.count(name)) c.fail(node, "'" + name + "' is both a base option and an axis");
      m.axes.push_back(std::move(ax));
    }
  }
}

// Configure stops when an enabled op has none of its declared backends (kernels/meson.build), so
// the constraint excludes, per op, the op enabled with all its backends disabled.
void add_enabled_op_needs_backend_rules(const Ctx& c, const toml::node& n, MatrixSpec& m) {
  for (const auto& op : c.manifest.ops) {
    Rule r;
    r.when[op.name] = "'enabled'";
    for (const auto& b : op.backends)
      if (c.catalog.find(b)) r.when[b] = "'disabled'";
    r.reason = "op '" + op.name + "' enabled with all its backends disabled stops configure by design";
    r.where = line_of(c.path, n);
    m.excludes.push_back(std::move(r));
  }
}

void read_generate(const Ctx& c, const toml::node& g, MatrixSpec& m) {
  auto* t = g.as_table();
  if (!t) c.fail(g, "[generate] must be a table");
  c.only_keys(*t, {"method", "constraints"}, "[generate]");
  m.generate = c.str(*t, "method", "[generate]", true);
  if (m.generate != "pairwise") c.fail(*t->get("method"), "unknown method '" + m.generate + "' (known: pairwise)");
  if (m.axes.size() < 2) c.fail(g, "pairwise generation needs at least two axes");
  if (auto* cons = t->get("constraints")) {
    auto* arr = cons->as_array();
    if (!arr) c.fail(*cons, "'constraints' must be an array of names");
    for (auto& n : *arr) {
      auto name = n.value_exact<std::string>().value_or("");
      if (name != "enabled-op-needs-backend")
        c.fail(n, "unknown constraint '" + name + "' (known: enabled-op-needs-backend)");
      add_enabled_op_needs_backend_rules(c, n, m);
    }
  }
}

void read_excludes(const Ctx& c, const toml::node& excludes, MatrixSpec& m) {
  for (auto& node : c.array_of_tables(excludes, "exclude")) {
    auto& t = *node.as_table();
    c.only_keys(t, {"when", "reason"}, "[[exclude]]");
    Rule r;
    if (!t.get("when")) c.fail(node, "[[exclude]] needs 'when'");
    r.when = c.options(*t.get("when"));
    r.reason = c.str(t, "reason", "[[exclude]]", true);
    r.where = line_of(c.path, node);
    m.excludes.push_back(std::move(r));
  }
}

void add_named_cell(const Ctx& c, const toml::node& node, std::set<std::string>& names, NamedCell cell, MatrixSpec& m) {
  if (!names.insert(cell.name).second) c.fail(node, "duplicate cell name '" + cell.name + "'");
  cell.where = line_of(c.path, node);
  m.cells.push_back(std::move(cell));
}

// Every feature the matrix varies, every op and every backend on; the cell's own options win.
Options all_on_corner_options(const Ctx& c, const MatrixSpec& m, const Options& opts) {
  Options o;
  for (const auto& ax : m.axes)
    if (c.catalog.find(ax.option)->feature()) o[ax.option] = "'enabled'";
  for (const auto& op : c.manifest.ops) o[op.name] = "'enabled'";
  for (const auto& b : c.manifest.backends()) o[b] = "'enabled'";
  for (const auto& [k, v] : opts) o[k] = v;
  return o;
}

// Every op off but one, for each op; the cell's own options win.
void add_one_op_corner_cells(const Ctx& c, const toml::node& node, std::set<std::string>& names,
                             const std::string& name, const Options& opts, MatrixSpec& m) {
  for (const auto& op : c.manifest.ops) {
    Options o;
    for (const auto& other : c.manifest.ops) o[other.name] = other.name == op.name ? "'enabled'" : "'disabled'";
    for (const auto& [k, v] : opts) o[k] = v;
    add_named_cell(c, node, names, {name + "-" + op.name, "corner:one-op", o, ""}, m);
  }
}

void read_cells(const Ctx& c, const toml::node& cells, MatrixSpec& m) {
  std::set<std::string> names;
  for (auto& node : c.array_of_tables(cells, "cell")) {
    auto& t = *node.as_table();
    c.only_keys(t, {"name", "options", "corner"}, "[[cell]]");
    Options opts = t.get("options") ? c.options(*t.get("options")) : Options{};
    std::string corner = t.get("corner") ? c.str(t, "corner", "[[cell]]", true) : "";
    std::string name = t.get("name") ? c.str(t, "name", "[[cell]]", true) : corner;
    if (name.empty()) c.fail(node, "[[cell]] needs 'name' (or 'corner')");
    if (corner.empty()) {
      add_named_cell(c, node, names, {name, "cell", opts, ""}, m);
    } else if (corner == "all-on") {
      add_named_cell(c, node, names, {name, "corner:all-on", all_on_corner_options(c, m, opts), ""}, m);
    } else if (corner == "one-op") {
      add_one_op_corner_cells(c, node, names, name, opts, m);
    } else {
      c.fail(*t.get("corner"), "unknown corner '" + corner + "' (known: all-on, one-op)");
    }
  }
}

void read_run_timeouts(const Ctx& c, const toml::node& to, RunSettings& run) {
  auto* tt = to.as_table();
  if (!tt) c.fail(to, "[run.timeouts] must be a table of step = seconds");
  for (auto&& [k, v] : *tt) {
    std::string step(k.str());
    if (!run.timeouts.count(step))
      c.fail(v, "unknown step '" + step + "' (setup, compile, test, inventory, bench, callgrind, chakra)");
    auto s = v.value<double>();
    if (!s || *s <= 0) c.fail(v, "timeout must be a positive number of seconds");
    run.timeouts[step] = *s;
  }
}

void read_run_settings(const Ctx& c, const toml::node& r, RunSettings& run) {
  auto* t = r.as_table();
  if (!t) c.fail(r, "[run] must be a table");
  c.only_keys(*t, {"bench", "callgrind", "bench_args", "timeouts"}, "[run]");
  if (auto* b = t->get("bench")) {
    auto v = b->value_exact<bool>();
    if (!v) c.fail(*b, "'bench' must be true or false");
    run.bench = *v;
  }
  if (auto* b = t->get("callgrind")) {
    auto v = b->value_exact<bool>();
    if (!v) c.fail(*b, "'callgrind' must be true or false");
    run.callgrind = *v;
  }
  if (auto* a = t->get("bench_args")) {
    auto* arr = a->as_array();
    if (!arr) c.fail(*a, "'bench_args' must be an array of strings");
    run.bench_args.clear();
    for (auto& e : *arr) {
      auto s = e.value_exact<std::string>();
      if (!s) c.fail(e, "'bench_args' must be an array of strings");
      run.bench_args.push_back(*s);
    }
  }
  if (auto* to = t->get("timeouts")) read_run_timeouts(c, *to, run);
}

}  // namespace

MatrixSpec parse_matrix(const std::string& text, const std::string& path, const OptionCatalog& catalog,
                        const OpManifest& manifest) {
  toml::table doc = parse_toml(text, path);
  Ctx c{path, catalog, manifest};
  MatrixSpec m;
  m.path = path;
  m.text = text;
  read_header(c, doc, m);
  if (auto* a = doc.get("axis")) read_axes(c, *a, m);
  if (auto* g = doc.get("generate")) read_generate(c, *g, m);
  if (auto* ex = doc.get("exclude")) read_excludes(c, *ex, m);
  if (auto* cells = doc.get("cell")) read_cells(c, *cells, m);
  if (auto* r = doc.get("run")) read_run_settings(c, *r, m.run);
  if (m.cells.empty() && m.generate.empty()) throw Error(path + ":1: the matrix has no [[cell]] and no [generate]");
  return m;
}

MatrixSpec read_matrix(const std::string& path, const OptionCatalog& catalog, const OpManifest& manifest) {
  return parse_matrix(files::read(path), path, catalog, manifest);
}

}  // namespace opf::matrix
