#include "matrix/load_plan.h"

#include <filesystem>

#include "common/files.h"
#include "opforge/build_info.h"
#include "opforge/error.h"

namespace opf::matrix {

std::string default_source_dir() { return build::source_root(); }

PlanSource load_plan(const std::string& path, const std::string& source_dir) {
  PlanSource ps;
  ps.source_dir =
      std::filesystem::absolute(source_dir.empty() ? default_source_dir() : source_dir).lexically_normal().string();
  if (!files::exists(ps.source_dir + "/meson.build"))
    throw Error(ps.source_dir + ": no meson.build here (use --source)");
  ps.catalog = OptionCatalog::introspect(ps.source_dir);
  if (path.size() > 5 && path.substr(path.size() - 5) == ".json") {
    ps.plan = Plan::from_json(json::parse_file(path), path);
    return ps;
  }
  auto manifest = OpManifest::read(ps.source_dir + "/kernels/manifest.toml");
  auto spec = read_matrix(path, ps.catalog, manifest);
  ps.plan = make_plan(spec, ps.catalog, toolchain_identity());
  return ps;
}

}  // namespace opf::matrix
