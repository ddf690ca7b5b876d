// `opforge ops [--json]`: what this build can run, like DeepSpeed's ds_report: per op x backend
// whether it is enabled, prebuilt, compatible here (and why not), and its JIT cache state, under
// a header with the toolchains Meson resolved.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "command.h"
#include "common/json_escape.h"
#include "opforge/build_info.h"
#include "opforge/loader.h"
#include "opforge/manifest.h"

namespace opf::cli {
namespace {

struct Row {
  std::string op, backend;
  bool enabled = false, prebuilt = false, compatible = false;
  std::string reason;
  CacheState cache;
  bool jit_used = false;   // would a load go through the JIT cache?
  std::string failed_log;  // compile log of the last failed build of this key, if any
};

const char* yn(bool b) { return b ? "yes" : "no"; }

std::vector<std::string> backends_of_interest() { return {"cpu", "cuda", "hip"}; }

std::vector<Row> collect() {
  auto& loader = Loader::instance();
  std::vector<Row> rows;
  for (const auto& op : op_table()) {
    for (const auto& b : op.declared_backends) {
      Row r;
      r.op = op.name;
      r.backend = b;
      r.enabled = op.has_backend(b);
      r.prebuilt = op.is_prebuilt(b);
      const Availability a = loader.availability(b);
      r.compatible = a.ok;
      r.reason = a.reason;
      if (r.enabled) r.cache = loader.cache_state(op, b);
      if (!r.cache.dir.empty() && std::filesystem::exists(r.cache.dir + ".failed/compile.log"))
        r.failed_log = r.cache.dir + ".failed/compile.log";
      r.jit_used = r.enabled && !r.prebuilt;
      rows.push_back(std::move(r));
    }
  }
  return rows;
}

std::string cache_text(const Row& r) {
  if (!r.enabled) return "-";
  if (r.cache.key.empty()) return "no key (sources not found)";
  std::string s = (r.cache.present ? "cached " : "not cached ") + r.cache.key.substr(0, 12);
  if (r.cache.pairs > 0)
    s += " (" + std::to_string(r.cache.pairs_present) + "/" + std::to_string(r.cache.pairs) + " entry x dtype modules)";
  if (!r.cache.present && !r.failed_log.empty()) s += " (last build failed: " + r.failed_log + ")";
  if (!r.jit_used) s += " (unused: prebuilt)";
  return s;
}

int print_table() {
  std::printf("opforge %s  (mode=%s)\n", build::version().c_str(), build::mode().c_str());
  std::printf("%s\n", std::string(100, '-').c_str());
  auto toolchain = [](const char* label, const build::Toolchain& t) {
    std::string cmd;
    for (const auto& a : t.command) cmd += (cmd.empty() ? "" : " ") + a;
    std::printf("%-22s %s %s [%s]\n", label, t.id.c_str(), t.version.c_str(), cmd.c_str());
  };
  toolchain("C++ compiler", build::cpp_toolchain());
  toolchain("CPU JIT compiler", build::cpu_jit_toolchain());
  for (const auto& b : backends_of_interest()) {
    if (!build::backend_enabled(b)) {
      std::printf("%-22s %s\n", (b + " backend").c_str(), "not built");
      continue;
    }
    std::string extra;
    if (b == "cuda" && !build::cuda_arch().empty()) {
      extra = " arch:";
      for (const auto& a : build::cuda_arch()) extra += " " + a;
    } else if (b == "hip" && !build::hip_arch().empty()) {
      extra = " arch:";
      for (const auto& a : build::hip_arch()) extra += " " + a;
    }
    std::printf("%-22s %s%s\n", (b + " backend").c_str(), build::backend_compiler_version(b).c_str(), extra.c_str());
  }
  std::printf("%-22s %s\n", "prebuilt modules", build::module_dir().c_str());
  std::string root;
  try {
    root = cache_root();
  } catch (const std::exception& e) {
    root = e.what();
  }
  std::printf("%-22s %s\n", "JIT cache", root.c_str());
  std::printf("%s\n", std::string(100, '-').c_str());
  std::printf("%-24s %-8s %-8s %-9s %-11s %s\n", "op", "backend", "enabled", "prebuilt", "compatible", "JIT cache");
  std::printf("%s\n", std::string(100, '-').c_str());
  std::vector<std::string> reasons;
  for (const auto& r : collect()) {
    std::printf("%-24s %-8s %-8s %-9s %-11s %s\n", r.op.c_str(), r.backend.c_str(), yn(r.enabled), yn(r.prebuilt),
                yn(r.compatible), cache_text(r).c_str());
    if (!r.compatible) reasons.push_back(r.backend + ": " + r.reason);
  }
  if (op_table().empty()) std::printf("(no op is enabled in this build)\n");
  // one line per backend that cannot run here, instead of repeating it on every row
  std::vector<std::string> seen;
  for (const auto& line : reasons) {
    bool dup = false;
    for (const auto& s : seen) dup |= s == line;
    if (dup) continue;
    seen.push_back(line);
    std::printf("  incompatible %s\n", line.c_str());
  }
  return 0;
}

int print_json() {
  std::string root;
  try {
    root = cache_root();
  } catch (const std::exception&) {
  }
  std::string o = "{\n";
  o += "  \"opforge_version\": " + json::quoted(build::version()) + ",\n";
  o += "  \"mode\": " + json::quoted(build::mode()) + ",\n";
  o += "  \"module_dir\": " + json::quoted(build::module_dir()) + ",\n";
  o += "  \"cache_root\": " + json::quoted(root) + ",\n";
  o += "  \"toolchains\": {\n";
  auto toolchain = [&o](const char* key, const build::Toolchain& t) {
    o += std::string("    \"") + key + "\": {\"id\": " + json::quoted(t.id) +
         ", \"version\": " + json::quoted(t.version) + ", \"command\": [";
    for (size_t i = 0; i < t.command.size(); ++i) o += (i ? ", " : "") + json::quoted(t.command[i]);
    o += "]}";
  };
  toolchain("cpp", build::cpp_toolchain());
  o += ",\n";
  toolchain("cpu_jit", build::cpu_jit_toolchain());
  for (const auto& b : backends_of_interest()) {
    o += ",\n    " + json::quoted(b) + ": {\"built\": " + (build::backend_enabled(b) ? "true" : "false") +
         ", \"compiler\": " + json::quoted(build::backend_compiler_version(b));
    const auto& archs = b == "cuda" ? build::cuda_arch() : b == "hip" ? build::hip_arch() : std::vector<std::string>{};
    if (b != "cpu" && build::backend_enabled(b)) {
      o += ", \"arch\": [";
      for (size_t i = 0; i < archs.size(); ++i) o += (i ? ", " : "") + json::quoted(archs[i]);
      o += "]";
    }
    o += "}";
  }
  o += "\n  },\n  \"ops\": [";
  bool first = true;
  for (const auto& r : collect()) {
    o += first ? "\n" : ",\n";
    first = false;
    o += "    {\"op\": " + json::quoted(r.op) + ", \"backend\": " + json::quoted(r.backend) +
         ", \"enabled\": " + (r.enabled ? "true" : "false") + ", \"prebuilt\": " + (r.prebuilt ? "true" : "false") +
         ", \"compatible\": " + (r.compatible ? "true" : "false") + ", \"reason\": " + json::quoted(r.reason) +
         ", \"jit\": " + (r.jit_used ? "true" : "false") + ", \"jit_cache\": {\"key\": " + json::quoted(r.cache.key) +
         ", \"present\": " + (r.cache.present ? "true" : "false") + ", \"dir\": " + json::quoted(r.cache.dir) +
         ", \"failed_log\": " + json::quoted(r.failed_log) + ", \"pairs\": " + std::to_string(r.cache.pairs) +
         ", \"pairs_present\": " + std::to_string(r.cache.pairs_present) + "}}";
  }
  o += "\n  ]\n}\n";
  std::fputs(o.c_str(), stdout);
  return 0;
}

}  // namespace

void add_ops_command(CLI::App& app) {
  auto* sub = app.add_subcommand("ops", "List ops x backends: enabled, prebuilt, compatible, JIT cache state");
  auto json = std::make_shared<bool>(false);
  sub->add_flag("--json", *json, "Machine-readable output (same content)");
  on_run(sub, [json] { return *json ? print_json() : print_table(); });
}

}  // namespace opf::cli
