// `opforge merge -o RUN BUNDLE...`: combine per-cell result bundles into one run.
#include <cstdio>
#include <memory>

#include "command.h"
#include "matrix/merge.h"

namespace opf::cli {

void add_merge_command(CLI::App& app) {
  struct Args {
    std::string out;
    std::vector<std::string> bundles;
  };
  auto a = std::make_shared<Args>();
  auto* m =
      app.add_subcommand("merge", "Combine per-cell result bundles (matrix run --cell ... --out DIR) into one run");
  m->add_option("-o,--out", a->out, "The merged run directory (must not exist)")->required();
  m->add_option("bundles", a->bundles, "Bundle run directories")->required();
  on_run(m, [a] {
    auto r = matrix::merge_runs(a->bundles, a->out);
    for (const auto& w : r.warnings) std::fprintf(stderr, "opforge merge: warning: %s\n", w.c_str());
    std::printf("%s: %d cells from %zu bundles\n", r.run_dir.c_str(), r.cells, a->bundles.size());
    return 0;
  });
}

}  // namespace opf::cli
