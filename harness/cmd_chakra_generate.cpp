// `opforge chakra generate --kind KIND --nodes N --ranks R --seed S -o PREFIX`: synthetic .et
// files PREFIX.<rank>.et. Bad options: one line naming the option, exit status 2, no file.
#include <cstdio>

#include "command.h"
#include "et_generator.h"
#include "input_error.h"

namespace opf::cli {

void add_chakra_generate_command(CLI::App& chakra) {
  auto* sub = chakra.add_subcommand("generate", "Synthetic Chakra .et files, one per rank (PREFIX.<rank>.et)");
  struct Args {
    chakra::GenerateOptions o;
    std::string prefix;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("--kind", a->o.kind, std::string("graph kind: ") + chakra::generate_kinds())->required();
  sub->add_option("--nodes", a->o.nodes, "nodes per rank (default 16)");
  sub->add_option("--ranks", a->o.ranks, "number of ranks (files; default 1)");
  sub->add_option("--seed", a->o.seed, "random seed (default 0); same options and seed, same files");
  sub->add_option("-o,--output", a->prefix, "output prefix: writes PREFIX.0.et ... PREFIX.<R-1>.et")->required();
  on_run(sub, [a] {
    try {
      chakra::generate(a->o, a->prefix);
    } catch (const chakra::InputError& e) {
      std::fprintf(stderr, "opforge: %s\n", e.what());
      return 2;
    }
    return 0;
  });
}

}  // namespace opf::cli
