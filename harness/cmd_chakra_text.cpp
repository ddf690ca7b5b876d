// `opforge chakra from-text WORKLOAD --npus N [--passes P] -o PREFIX [--compat reference]`:
// ASTRA-sim text workload -> PREFIX.<npu>.et. Bad input (file or options): one line
// "FILE:LINE: problem" on stderr, exit status 2, no file written.
#include <cstdio>

#include "command.h"
#include "from_text.h"
#include "input_error.h"

namespace opf::cli {

void add_chakra_text_command(CLI::App& chakra) {
  auto* sub = chakra.add_subcommand("from-text", "ASTRA-sim text workload -> Chakra .et, one file per NPU (PREFIX.<npu>.et)");
  struct Args {
    std::string workload, prefix, compat;
    uint64_t npus = 0, passes = 1;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("workload", a->workload, "text workload (first line: MICRO, DATA, MODEL, HYBRID_*)")->required();
  sub->add_option("--npus", a->npus, "number of NPUs (files)")->required();
  sub->add_option("--passes", a->passes, "training passes per file (default 1)");
  sub->add_option("-o,--output", a->prefix, "output prefix: writes PREFIX.0.et ... PREFIX.<N-1>.et")->required();
  sub->add_option("--compat", a->compat, "'reference': the MLCommons text converter's bytes, bugs included");
  on_run(sub, [a] {
    try {
      if (!a->compat.empty() && a->compat != "reference")
        throw chakra::InputError("--compat", "", "unknown value '" + a->compat + "' (only 'reference')");
      chakra::FromTextOptions o;
      o.npus = a->npus;
      o.passes = a->passes;
      o.compat_reference = !a->compat.empty();
      chakra::from_text(a->workload, a->prefix, o);
    } catch (const chakra::InputError& e) {
      std::fprintf(stderr, "opforge: %s\n", e.what());
      return 2;
    }
    return 0;
  });
}

}  // namespace opf::cli
