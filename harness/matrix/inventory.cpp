#include "matrix/inventory.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "common/files.h"
#include "matrix/process.h"

namespace opf::matrix {
namespace fs = std::filesystem;

namespace {

using Pair = std::pair<std::string, std::string>;  // op, backend

std::set<std::string> resolved_backends(const std::string& build_dir) {
  std::set<std::string> out;
  std::string text;
  if (!files::read_if_exists(build_dir + "/kernels/build_config.h", text)) return out;
  static const std::regex re(R"(#define\s+OPF_HAVE_([A-Z0-9_]+)\s+1)");
  for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it) {
    std::string b = (*it)[1];
    std::transform(b.begin(), b.end(), b.begin(), ::tolower);
    out.insert(b);
  }
  return out;
}

bool introspect(const std::string& build_dir, const char* what, json::Value& out) {
  std::string text;
  if (!proc::capture({"meson", "introspect", build_dir, what}, text, "", 120)) return false;
  out = json::parse(text, "meson introspect " + build_dir + " " + what);
  return true;
}

// JIT cache roots the build's tests run with (their OPFORGE_CACHE_DIR), from meson introspect --tests.
std::vector<std::string> tests_cache_dirs(const std::string& build_dir) {
  json::Value tests;
  std::vector<std::string> out;
  if (!introspect(build_dir, "--tests", tests)) return out;
  for (const auto& t : tests.as_array()) {
    std::string d = t.get("env").str("OPFORGE_CACHE_DIR");
    if (!d.empty() && std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
  }
  return out;
}

// What the build's options and resolved backends say it should have.
struct Expected {
  std::string mode;
  bool prebuilt = false;
  std::set<Pair> pairs;
  std::set<std::string> ops;
};

void add_check(Inventory& inv, std::string what, std::string op, std::string b, bool ok, std::string detail) {
  inv.checks.push_back({std::move(what), std::move(op), std::move(b), ok ? "pass" : "fail", std::move(detail)});
}

// False (with a failed check) when Meson cannot say; then nothing else can be checked.
bool read_expected_ops(const InventoryInputs& in, const OpManifest& manifest, Inventory& inv, Expected& ex) {
  json::Value opts;
  if (!introspect(in.build_dir, "--buildoptions", opts)) {
    add_check(inv, "expected-ops", "", "", false, "meson introspect --buildoptions failed on " + in.build_dir);
    return false;
  }
  std::map<std::string, std::string> value;
  for (const auto& o : opts.as_array())
    if (o.get("value").is_string()) value[o.str("name")] = o.str("value");
  ex.mode = value["mode"];
  ex.prebuilt = ex.mode == "prebuilt" || ex.mode == "both";
  auto backends = resolved_backends(in.build_dir);
  // introspect reports a feature as set; auto_features=disabled turns every `auto` one off
  const bool auto_off = value["auto_features"] == "disabled";
  for (const auto& op : manifest.ops) {
    if (value[op.name] == "disabled" || (auto_off && value[op.name] == "auto")) continue;
    for (const auto& b : op.backends)
      if (backends.count(b)) ex.pairs.insert({op.name, b}), ex.ops.insert(op.name);
  }
  std::string list;
  for (const auto& [op, b] : ex.pairs) list += (list.empty() ? "" : ", ") + op + "/" + b;
  std::string bl;
  for (const auto& b : backends) bl += (bl.empty() ? "" : ",") + b;
  add_check(inv, "expected-ops", "", "", true,
            "mode=" + ex.mode + " backends=" + bl + " -> " + (list.empty() ? "(none)" : list));
  return true;
}

// Files of the module targets Meson builds, per op/backend.
std::map<Pair, std::vector<std::string>> module_targets(const InventoryInputs& in, const OpManifest& manifest,
                                                        Inventory& inv) {
  json::Value targets;
  std::map<Pair, std::vector<std::string>> modules;
  if (introspect(in.build_dir, "--targets", targets)) {
    for (const auto& t : targets.as_array()) {
      std::string name = t.str("name");
      for (const auto& op : manifest.ops)
        for (const auto& b : op.backends)
          if (name == "opf_" + op.name + "_" + b || name == op.name + "_" + b)
            for (const auto& f : t.get("filename").as_array()) modules[{op.name, b}].push_back(f.as_string());
    }
  } else {
    add_check(inv, "module", "", "", false, "meson introspect --targets failed");
  }
  return modules;
}

// Prebuilt mode builds a module per enabled op/backend, JIT mode none, and no mode one of a disabled op.
void check_module_targets(const InventoryInputs& in, const OpManifest& manifest, const Expected& ex, Inventory& inv) {
  auto modules = module_targets(in, manifest, inv);
  for (const auto& op : manifest.ops)
    for (const auto& b : op.backends) {
      Pair p{op.name, b};
      auto it = modules.find(p);
      bool has_target = it != modules.end();
      bool files_present = has_target && std::all_of(it->second.begin(), it->second.end(),
                                                     [](const std::string& f) { return files::exists(f); });
      if (ex.pairs.count(p) && ex.prebuilt) {
        add_check(inv, "module", op.name, b, has_target && files_present,
                  has_target ? (files_present ? it->second.front()
                                              : "module target exists but its file is missing: " + it->second.front())
                             : "prebuilt mode but no module target");
      } else if (ex.pairs.count(p)) {
        add_check(inv, "no-module", op.name, b, !has_target,
                  has_target ? "jit mode but Meson builds " + it->second.front() : "not prebuilt (JIT at first use)");
      } else if (has_target) {
        add_check(inv, "disabled", op.name, b, false, "not enabled but Meson builds " + it->second.front());
      }
    }
}

// Stray module files of ops that are not enabled (e.g. left by a bad rule).
void check_stray_module_files(const InventoryInputs& in, const OpManifest& manifest, const Expected& ex,
                              Inventory& inv) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(in.build_dir + "/kernels", ec)) {
    std::string f = e.path().filename().string();
    for (const auto& op : manifest.ops)
      for (const auto& b : op.backends) {
        bool module_name = f == "opf_" + op.name + "_" + b + ".so" || f.rfind(op.name + "_" + b + ".", 0) == 0;
        if (module_name && (!ex.pairs.count({op.name, b}) || !ex.prebuilt) && !e.path().string().ends_with(".p"))
          add_check(inv, "no-module", op.name, b, false, "unexpected module file " + e.path().string());
      }
  }
}

// jit: the tests' first use published a cache entry under the key this build computes (a build
// without tests has no such cache; the load probe still compiles and reloads each op).
void check_jit_cache_entries(const Expected& ex, const std::vector<std::string>& caches,
                             std::map<Pair, json::Value>& row, Inventory& inv) {
  std::error_code ec;
  for (const auto& p : ex.pairs) {
    const auto& r = row[p];
    // the key this build computes; the entry must be <cache>/<op>/<backend>/<key>/ in one
    // of the caches the tests used
    std::string key = r.get("jit_cache").str("key");
    std::string found;
    for (const auto& root : caches) {
      std::string d = root + "/" + p.first + "/" + p.second + "/" + key;
      if (!key.empty() && fs::is_directory(d, ec) && !fs::is_empty(d, ec)) found = d;
    }
    if (!r.get("compatible").as_bool() && found.empty()) {
      inv.checks.push_back({"jit-cache", p.first, p.second, "owed", "not built: " + r.str("reason")});
    } else if (key.empty()) {
      add_check(inv, "jit-cache", p.first, p.second, false, "opforge ops reports no cache key");
    } else {
      std::string where;
      for (const auto& root : caches) where += (where.empty() ? "" : ", ") + root;
      add_check(inv, "jit-cache", p.first, p.second, !found.empty(),
                found.empty() ? "no entry " + p.first + "/" + p.second + "/" + key.substr(0, 12) +
                                    "... in the tests' caches (" + where + ")"
                              : found);
    }
  }
}

// The cell's own `opforge ops` listing agrees with the options, op by op.
void check_listing(const InventoryInputs& in, const OpManifest& manifest, const Expected& ex,
                   const std::string& opforge, const std::vector<std::string>& caches, Inventory& inv) {
  std::string listing;
  if (!proc::capture({opforge, "ops", "--json"}, listing, in.source_dir, 60)) listing.clear();
  if (listing.empty()) {
    add_check(inv, "listing", "", "", false, opforge + " ops --json failed");
    return;
  }
  auto doc = json::parse(listing, opforge + " ops --json");
  std::set<Pair> listed;
  std::map<Pair, json::Value> row;
  for (const auto& r : doc.get("ops").as_array())
    if (r.get("enabled").as_bool()) {
      listed.insert({r.str("op"), r.str("backend")});
      row[{r.str("op"), r.str("backend")}] = r;
    }
  for (const auto& p : ex.pairs)
    add_check(inv, "listing", p.first, p.second, listed.count(p) > 0,
              listed.count(p) ? "listed as enabled" : "missing from opforge ops");
  for (const auto& p : listed)
    if (!ex.pairs.count(p))
      add_check(inv, "listing", p.first, p.second, false, "listed as enabled but options say it is not");
  for (const auto& op : manifest.ops)
    if (!ex.ops.count(op.name)) {
      bool present = false;
      for (const auto& r : doc.get("ops").as_array()) present = present || r.str("op") == op.name;
      add_check(inv, "disabled", op.name, "", !present, present ? "disabled op is listed" : "absent");
    }
  if (!ex.prebuilt && !caches.empty()) check_jit_cache_entries(ex, caches, row, inv);
}

// Every enabled op loads with the cell's own loader, from a fresh cache.
void check_probe_loads(const InventoryInputs& in, const Expected& ex, const std::string& opforge, Inventory& inv) {
  std::error_code ec;
  std::string probe_cache = in.work_dir + "/probe-cache";
  fs::remove_all(probe_cache, ec);
  std::string probe_out = in.work_dir + "/probe.json";
  std::string probe_text;
  bool ran = proc::capture({"env", "OPFORGE_CACHE_DIR=" + probe_cache, opforge, "matrix", "probe"}, probe_text,
                           in.source_dir, in.timeout_s);
  if (!ran) {
    add_check(inv, "load", "", "", false, opforge + " matrix probe failed");
  } else {
    inv.probe = json::parse(probe_text, opforge + " matrix probe");
    files::write_atomic(probe_out, json::dump(inv.probe));
    std::set<Pair> probed;
    for (const auto& l : inv.probe.get("loads").as_array()) {
      Pair p{l.str("op"), l.str("backend")};
      probed.insert(p);
      std::string st = l.str("status");
      if (st == "unavailable") {
        inv.checks.push_back({"load", p.first, p.second, "owed", l.str("reason")});
        continue;
      }
      std::string cold = l.get("cold").str("source"), warm = l.get("warm").str("source");
      bool ok = st == "loaded" && (ex.prebuilt ? cold == "prebuilt" : (cold == "jit-compiled" && warm == "jit-cache"));
      char t[96];
      std::snprintf(t, sizeof t, " (%.3f s cold, %.6f s warm)", l.get("cold").num("seconds"),
                    l.get("warm").num("seconds"));
      add_check(inv, "load", p.first, p.second, ok, st == "loaded" ? cold + " then " + warm + t : l.str("reason"));
    }
    for (const auto& p : ex.pairs)
      if (!probed.count(p)) add_check(inv, "load", p.first, p.second, false, "not loaded by the probe");
  }
  fs::remove_all(probe_cache, ec);
}

void write_inventory_log(const Inventory& inv, const std::string& path) {
  std::string log;
  for (const auto& c : inv.checks)
    log += c.status + "  " + c.what + " " + c.op + (c.backend.empty() ? "" : "/" + c.backend) + "  " + c.detail + "\n";
  files::write_atomic(path, log);
}

}  // namespace

bool Inventory::failed() const {
  for (const auto& c : checks)
    if (c.status == "fail") return true;
  return false;
}

json::Value Inventory::to_json() const {
  json::Value v;
  v.set("schema", "opforge.inventory/1");
  int pass = 0, fail = 0, owed = 0;
  json::Value a = json::Array{};
  for (const auto& c : checks) {
    (c.status == "pass" ? pass : c.status == "fail" ? fail : owed)++;
    json::Value j;
    j.set("what", c.what);
    if (!c.op.empty()) j.set("op", c.op);
    if (!c.backend.empty()) j.set("backend", c.backend);
    j.set("status", c.status);
    if (!c.detail.empty()) j.set("detail", c.detail);
    a.push(j);
  }
  v.set("passed", pass);
  v.set("failed", fail);
  v.set("owed", owed);
  v.set("checks", a);
  v.set("probe", probe);
  return v;
}

Inventory check_inventory(const InventoryInputs& in, const OpManifest& manifest) {
  Inventory inv;
  Expected ex;
  if (!read_expected_ops(in, manifest, inv, ex)) {
    write_inventory_log(inv, in.log_path);  // the step's log names the failed check too
    return inv;
  }
  check_module_targets(in, manifest, ex, inv);
  check_stray_module_files(in, manifest, ex, inv);
  std::string opforge = in.build_dir + "/harness/opforge";
  auto caches = tests_cache_dirs(in.build_dir);
  check_listing(in, manifest, ex, opforge, caches, inv);
  check_probe_loads(in, ex, opforge, inv);
  write_inventory_log(inv, in.log_path);
  return inv;
}

}  // namespace opf::matrix
