#include "matrix/merge.h"

#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>

#include "common/files.h"
#include "common/utc_time.h"
#include "matrix/json.h"
#include "matrix/run_layout.h"
#include "opforge/error.h"

namespace opf::matrix {
namespace fs = std::filesystem;

namespace {
// Copies a cell's records; its build tree is not a result.
void copy_cell(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  for (const auto& e : fs::directory_iterator(from)) {
    if (e.path().filename() == "build") continue;
    fs::copy(e.path(), to / e.path().filename(), fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  }
}
}  // namespace

MergeResult merge_runs(const std::vector<std::string>& bundles, const std::string& out_arg) {
  if (bundles.empty()) throw Error("merge: no bundles given");
  std::string out = fs::absolute(out_arg).lexically_normal().string();
  if (fs::exists(out)) throw Error(out + ": exists; merge writes a new run and never overwrites one");
  MergeResult res;
  res.run_dir = out;
  std::string tmp = out + ".tmp." + std::to_string(getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp + "/cells");

  json::Value manifest;
  json::Value cells = json::Array{};
  json::Value sources = json::Array{};
  std::map<std::string, std::string> owner;  // cell id -> bundle
  std::set<std::string> commits;
  std::string plan_sha;
  try {
    for (const auto& b : bundles) {
      if (!files::exists(b + "/run.json")) throw Error(b + ": not a run bundle (no run.json)");
      auto m = json::parse_file(b + "/run.json");
      if (m.str("schema") != "opforge.run/1") throw Error(b + "/run.json: not opforge.run/1");
      std::string sha = m.get("matrix").str("sha256");
      if (plan_sha.empty()) plan_sha = sha;
      else if (sha != plan_sha)
        throw Error(b + ": bundle of a different matrix (sha256 " + sha.substr(0, 12) + " vs " +
                    plan_sha.substr(0, 12) + ")");
      commits.insert(m.get("git").str("sha") + (m.get("git").get("dirty").as_bool() ? "+dirty" : ""));
      if (manifest.is_null()) {
        manifest = m;
        if (files::exists(b + "/plan.json")) files::copy_atomic(b + "/plan.json", tmp + "/plan.json");
      }
      json::Value src;
      src.set("bundle", fs::absolute(b).lexically_normal().string());
      src.set("run", m.str("run"));
      src.set("host", m.get("machine").str("host"));
      src.set("git", m.get("git"));
      src.set("bandwidth", m.get("bandwidth"));
      json::Value ids = json::Array{};
      for (const auto& d : cell_dirs(b)) {
        if (!cell_finished(d)) continue;  // an interrupted cell is not a result
        std::string id = fs::path(d).filename().string();
        if (owner.count(id)) throw Error("cell " + id + " is in both " + owner[id] + " and " + b);
        owner[id] = b;
        copy_cell(d, tmp + "/cells/" + id);
        ids.push(id);
        for (const auto& c : m.get("cells").as_array())
          if (c.str("id") == id) cells.push(c);
        ++res.cells;
      }
      src.set("cells", ids);
      sources.push(src);
    }
    if (commits.size() > 1) {
      std::string all;
      for (const auto& c : commits) all += (all.empty() ? "" : ", ") + c.substr(0, 18);
      res.warnings.push_back("bundles come from different commits: " + all);
    }
    manifest.set("run", fs::path(out).filename().string());
    manifest.set("merged_utc", utc_timestamp());
    manifest.set("merged_from", sources);
    manifest.set("cells", cells);
    json::Value sum;
    int passed = 0, failed = 0;
    for (const auto& c : finished_cells(tmp)) (c.str("status") == "pass" ? passed : failed)++;
    sum.set("cells_planned", manifest.get("matrix").get("planned_cells"));
    sum.set("cells_finished", passed + failed);
    sum.set("passed", passed);
    sum.set("failed", failed);
    auto debt = gpu_debt_ledger(tmp, manifest.get("git").str("sha"));
    sum.set("gpu_debt", int64_t(debt.get("items").as_array().size()));
    manifest.set("summary", sum);
    manifest.set("status", "merged");
    if (!res.warnings.empty()) manifest.set("warnings", json::Array{json::Value(res.warnings.front())});
    files::write_atomic(tmp + "/gpu_debt.json", json::dump(debt));
    files::write_atomic(tmp + "/run.json", json::dump(manifest));
    fs::rename(tmp, out);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  return res;
}

}  // namespace opf::matrix
