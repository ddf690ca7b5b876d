// `opforge clean [--dry-run]`: removes opforge JIT cache entries and nothing else.
//
// Only what matches the cache layout and carries an opforge sidecar (published and failed
// entries), abandoned build dirs and free lock files are touched (the loader's cache API decides);
// a user's file in the cache directory is never listed, let alone removed.
#include <cstdio>
#include <string>

#include "command.h"
#include "opforge/loader.h"

namespace opf::cli {

void add_clean_command(CLI::App& app) {
  auto* sub = app.add_subcommand("clean", "Remove opforge JIT cache entries (only those) from the cache directory");
  auto dry_run = std::make_shared<bool>(false);
  sub->add_flag("--dry-run,-n", *dry_run, "List what would be removed; remove nothing");
  on_run(sub, [dry_run] {
    const std::string root = cache_root();
    const auto items = list_cache_items(root);
    if (items.empty()) {
      std::printf("no opforge cache entries in %s\n", root.c_str());
      return 0;
    }
    long long bytes = 0;
    int failed = 0;
    for (const auto& it : items) {
      const char* verb = *dry_run ? "would remove" : "removed";
      if (!*dry_run && !remove_cache_item(it)) {
        std::fprintf(stderr, "opforge: could not remove %s\n", it.path.c_str());
        ++failed;
        continue;
      }
      bytes += it.bytes;
      std::printf("%s %-6s %-24s %-5s %8.1f KiB  %s\n", verb, it.kind.c_str(), it.op.c_str(), it.backend.c_str(),
                  double(it.bytes) / 1024.0, it.path.c_str());
    }
    std::printf("%s %zu item(s), %.1f MiB, in %s\n", *dry_run ? "would remove" : "removed",
                items.size() - size_t(failed), double(bytes) / (1024.0 * 1024.0), root.c_str());
    return failed ? 1 : 0;
  });
}

}  // namespace opf::cli
