// `opforge chakra visualize IN.et -o OUT.dot|OUT.graphml|OUT.html [--range A:B | --around ID
// [--depth K]]`. Bad input: one line naming the file or option, exit status 2, no output.
// A graph the validator would reject (missing deps, duplicate ids, cycles) is still drawn, with
// a warning: looking at it is how one finds out why.
#include <cstdio>

#include "command.h"
#include "input_error.h"
#include "visualize.h"

namespace opf::cli {

void add_chakra_visualize_command(CLI::App& chakra) {
  auto* sub =
      chakra.add_subcommand("visualize", "Draw an .et graph: Graphviz .dot, .graphml, or a self-contained .html");
  struct Args {
    std::string in, out, range;
    uint64_t around = 0;
    uint32_t depth = 2;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("in", a->in, ".et file")->required();
  sub->add_option("-o,--output", a->out, "OUT.dot / OUT.gv, OUT.graphml or OUT.html (format from the extension)")
      ->required();
  auto* range = sub->add_option("--range", a->range, "only nodes with ids A..B (A: and :B are open ends)");
  auto* around = sub->add_option("--around", a->around, "only nodes within --depth dependency hops of this node id");
  sub->add_option("--depth", a->depth, "hops for --around (default 2)");
  on_run(sub, [a, range, around] {
    try {
      chakra::VizSelection sel;
      if (range->count()) sel.range = chakra::parse_id_range(a->range);
      if (around->count()) sel.around = a->around;
      sel.depth = a->depth;
      auto st = chakra::visualize(a->in, a->out, sel);
      if (st.missing_deps)
        std::fprintf(stderr, "opforge: warning: %s: %zu dependencies on ids not in the file (not drawn)\n",
                     a->in.c_str(), st.missing_deps);
      if (st.duplicate_ids)
        std::fprintf(stderr, "opforge: warning: %s: %zu nodes repeat an earlier id (edges go to the first)\n",
                     a->in.c_str(), st.duplicate_ids);
      if (st.cyclic)
        std::fprintf(stderr,
                     "opforge: warning: %s: %zu nodes on or behind dependency cycles (drawn in the last layer)\n",
                     a->in.c_str(), st.cyclic);
    } catch (const chakra::InputError& e) {
      std::fprintf(stderr, "opforge: %s\n", e.what());
      return 2;
    }
    return 0;
  });
}

}  // namespace opf::cli
