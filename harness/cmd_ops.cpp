// `opforge ops`: what this build has (placeholder table until the loader lands).
#include <cstdio>

#include "command.h"
#include "opforge/manifest.h"

namespace opf::cli {

void add_ops_command(CLI::App& app) {
  auto* sub = app.add_subcommand("ops", "List ops x backends: enabled, prebuilt, compatible, JIT cache state");
  on_run(sub, [] {
    for (const auto& op : op_table())
      for (const auto& b : op.enabled_backends)
        std::printf("%-24s %-5s %s\n", op.name.c_str(), b.c_str(), op.is_prebuilt(b) ? "prebuilt" : "jit");
    return 0;
  });
}

}  // namespace opf::cli
