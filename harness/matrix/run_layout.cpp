#include "matrix/run_layout.h"

#include <algorithm>
#include <filesystem>

#include "common/files.h"
#include "opforge/error.h"

namespace opf::matrix {
namespace fs = std::filesystem;

std::string resolve_run(const std::string& arg, const std::string& source_dir) {
  std::error_code ec;
  if (fs::is_directory(arg, ec)) return fs::absolute(arg).lexically_normal().string();
  std::string under = source_dir + "/results/runs/" + arg;
  if (fs::is_directory(under, ec)) return under;
  throw Error(arg + ": no such run (neither a directory nor a name under " + source_dir + "/results/runs/)");
}

std::vector<std::string> cell_dirs(const std::string& run_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(run_dir + "/cells", ec))
    if (e.is_directory()) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

bool cell_finished(const std::string& cell_dir) {
  std::string text;
  if (!files::read_if_exists(cell_dir + "/cell.json", text)) return false;
  try {
    auto s = json::parse(text, cell_dir + "/cell.json").str("status");
    return s == "pass" || s == "fail";
  } catch (const Error&) {
    return false;
  }
}

std::vector<json::Value> finished_cells(const std::string& run_dir) {
  std::vector<json::Value> out;
  for (const auto& d : cell_dirs(run_dir))
    if (cell_finished(d)) {
      auto v = json::parse_file(d + "/cell.json");
      v.set("dir", d);
      out.push_back(std::move(v));
    }
  return out;
}

json::Value gpu_debt_ledger(const std::string& run_dir, const std::string& commit) {
  json::Value debt;
  debt.set("schema", "opforge.gpu-debt/1");
  debt.set("commit", commit);
  json::Value items = json::Array{};
  for (const auto& cell : finished_cells(run_dir))
    for (const auto& d : cell.get("gpu_debt").as_array()) {
      json::Value i;
      i.set("cell_id", cell.str("id"));
      i.set("cell", cell.str("name"));
      i.set("test", d.str("test"));
      i.set("reason", d.str("reason"));
      i.set("commit", commit);
      items.push(i);
    }
  debt.set("items", items);
  return debt;
}

}  // namespace opf::matrix
