#include "matrix/plan.h"

#include <algorithm>
#include <map>

#include "common/sha256.h"
#include "matrix/pairwise.h"
#include "opforge/build_info.h"
#include "opforge/error.h"

namespace opf::matrix {
namespace {

std::string effective(const std::string& name, const Options& cell, const OptionCatalog& catalog) {
  if (auto it = cell.find(name); it != cell.end()) return it->second;
  if (auto* o = catalog.find(name)) return o->default_literal;
  return "";
}

const Rule* matching_rule(const std::vector<Rule>& rules, const Options& cell, const OptionCatalog& catalog) {
  for (const auto& r : rules) {
    bool all = true;
    for (const auto& [k, v] : r.when) all = all && effective(k, cell, catalog) == v;
    if (all) return &r;
  }
  return nullptr;
}

}  // namespace

std::string options_summary(const Options& o) {
  std::string s;
  for (const auto& [k, v] : o) s += (s.empty() ? "" : " ") + k + "=" + display_literal(v);
  return s;
}

std::string cell_id(const Options& options, const std::string& toolchain) {
  std::string text = "opforge-cell/1\ntoolchain=" + toolchain + "\n";
  for (const auto& [k, v] : options) text += k + "=" + v + "\n";  // std::map: sorted
  return hash::sha256_hex(text).substr(0, 12);
}

std::string toolchain_identity() {
  const auto& t = build::cpp_toolchain();
  return t.id + " " + t.version;
}

std::string native_file(const Cell& cell, const OptionCatalog& catalog) {
  std::string builtin, project;
  for (const auto& [k, v] : cell.options) {
    auto* o = catalog.find(k);
    ((o && o->project()) ? project : builtin) += k + " = " + v + "\n";
  }
  std::string s = "# opforge matrix cell " + cell.id + " (" + cell.name + "), generated\n";
  s += "[built-in options]\n" + builtin + "\n[project options]\n" + project;
  return s;
}

Plan make_plan(const MatrixSpec& spec, const OptionCatalog& catalog, const std::string& toolchain) {
  Plan plan;
  plan.matrix_path = spec.path;
  plan.toolchain = toolchain;
  plan.axes = spec.axes;
  plan.run = spec.run;
  plan.matrix_text = spec.text;
  if (!spec.axes.empty()) {
    plan.cartesian = 1;
    for (const auto& a : spec.axes) plan.cartesian *= double(a.literals.size());
  }

  std::vector<std::pair<Cell, std::string>> candidates;  // cell, where
  for (const auto& nc : spec.cells) {
    Cell c{"", nc.name, nc.origin, spec.base};
    for (const auto& [k, v] : nc.options) c.options[k] = v;
    candidates.emplace_back(std::move(c), nc.where);
  }

  if (spec.generate == "pairwise") {
    PairwiseProblem prob;
    for (const auto& a : spec.axes) prob.sizes.push_back(int(a.literals.size()));
    for (const auto& r : spec.excludes) {
      std::vector<std::pair<int, int>> f;
      bool can_fire = true;
      for (const auto& [key, v] : r.when) {
        const std::string& k = key;  // clang < 16 cannot capture a structured binding
        auto ax = std::find_if(spec.axes.begin(), spec.axes.end(), [&](const Axis& a) { return a.option == k; });
        if (ax == spec.axes.end()) {
          can_fire = can_fire && effective(k, spec.base, catalog) == v;
          continue;
        }
        auto val = std::find(ax->literals.begin(), ax->literals.end(), v);
        if (val == ax->literals.end()) {
          can_fire = false;
          continue;
        }
        f.emplace_back(int(ax - spec.axes.begin()), int(val - ax->literals.begin()));
      }
      if (!can_fire) continue;
      if (f.empty()) throw Error(r.where + ": this exclude rule matches every generated cell");
      prob.forbidden.push_back(std::move(f));
    }
    auto res = generate_pairwise(prob);
    plan.pairs_total = res.pairs_total;
    plan.pairs_infeasible = res.pairs_infeasible;
    int k = 0;
    for (const auto& row : res.rows) {
      char name[32];
      std::snprintf(name, sizeof name, "pw-%02d", ++k);
      Cell c{"", name, "pairwise", spec.base};
      for (size_t a = 0; a < row.size(); ++a) c.options[spec.axes[a].option] = spec.axes[a].literals[size_t(row[a])];
      candidates.emplace_back(std::move(c), spec.path);
    }
  }

  std::map<std::string, std::string> seen;  // id -> name
  for (auto& [c, where] : candidates) {
    if (auto* r = matching_rule(spec.excludes, c.options, catalog)) {
      plan.excluded.push_back({c.name, c.options, r->reason, r->where});
      continue;
    }
    c.id = cell_id(c.options, toolchain);
    if (auto it = seen.find(c.id); it != seen.end()) {
      plan.excluded.push_back({c.name, c.options, "same options as cell '" + it->second + "'", where});
      continue;
    }
    seen[c.id] = c.name;
    plan.cells.push_back(std::move(c));
  }
  return plan;
}

const Cell* Plan::find(const std::string& key) const {
  for (const auto& c : cells)
    if (c.id == key || c.name == key) return &c;
  return nullptr;
}

namespace {
json::Value options_json(const Options& o) {
  json::Value v = json::Object{};
  for (const auto& [k, lit] : o) v.set(k, lit);
  return v;
}
Options options_from(const json::Value& v) {
  Options o;
  for (const auto& [k, lit] : v.as_object()) o[k] = lit.as_string();
  return o;
}
}  // namespace

json::Value Plan::to_json() const {
  json::Value v;
  v.set("schema", "opforge.plan/1");
  v.set("matrix_file", matrix_path);
  v.set("toolchain", toolchain);
  json::Value axes = json::Array{};
  for (const auto& a : this->axes) {
    json::Value ax;
    ax.set("option", a.option);
    json::Value vals = json::Array{};
    for (const auto& l : a.literals) vals.push(l);
    ax.set("values", vals);
    axes.push(ax);
  }
  v.set("axes", axes);
  v.set("cartesian_cells", cartesian);
  v.set("pairs_total", pairs_total);
  v.set("pairs_infeasible", pairs_infeasible);
  json::Value cs = json::Array{};
  for (const auto& c : cells) {
    json::Value j;
    j.set("id", c.id);
    j.set("name", c.name);
    j.set("origin", c.origin);
    j.set("options", options_json(c.options));
    cs.push(j);
  }
  v.set("cells", cs);
  json::Value ex = json::Array{};
  for (const auto& e : excluded) {
    json::Value j;
    j.set("name", e.name);
    j.set("options", options_json(e.options));
    j.set("reason", e.reason);
    j.set("where", e.where);
    ex.push(j);
  }
  v.set("excluded", ex);
  json::Value run_v;
  run_v.set("bench", run.bench);
  run_v.set("callgrind", run.callgrind);
  json::Value args = json::Array{};
  for (const auto& a : run.bench_args) args.push(a);
  run_v.set("bench_args", args);
  json::Value to = json::Object{};
  for (const auto& [k, s] : run.timeouts) to.set(k, s);
  run_v.set("timeouts", to);
  v.set("run", run_v);
  v.set("matrix_text", matrix_text);
  return v;
}

Plan Plan::from_json(const json::Value& v, const std::string& origin) {
  if (v.str("schema") != "opforge.plan/1") throw Error(origin + ": not an opforge plan (schema opforge.plan/1)");
  Plan p;
  p.matrix_path = v.str("matrix_file");
  p.toolchain = v.str("toolchain");
  p.cartesian = v.num("cartesian_cells");
  p.pairs_total = v.get("pairs_total").as_int();
  p.pairs_infeasible = v.get("pairs_infeasible").as_int();
  p.matrix_text = v.str("matrix_text");
  for (const auto& a : v.get("axes").as_array()) {
    Axis ax{a.str("option"), {}};
    for (const auto& l : a.get("values").as_array()) ax.literals.push_back(l.as_string());
    p.axes.push_back(ax);
  }
  for (const auto& c : v.get("cells").as_array()) {
    Cell cell{c.str("id"), c.str("name"), c.str("origin"), options_from(c.get("options"))};
    if (cell.id.empty()) throw Error(origin + ": cell without id");
    p.cells.push_back(cell);
  }
  for (const auto& e : v.get("excluded").as_array())
    p.excluded.push_back({e.str("name"), options_from(e.get("options")), e.str("reason"), e.str("where")});
  const auto& r = v.get("run");
  p.run.bench = r.get("bench").as_bool();
  p.run.callgrind = r.get("callgrind").as_bool();  // absent in plans written before the step existed
  if (r.has("bench_args")) {
    p.run.bench_args.clear();
    for (const auto& a : r.get("bench_args").as_array()) p.run.bench_args.push_back(a.as_string());
  }
  for (const auto& [k, s] : r.get("timeouts").as_object()) p.run.timeouts[k] = s.as_double();
  return p;
}

}  // namespace opf::matrix
