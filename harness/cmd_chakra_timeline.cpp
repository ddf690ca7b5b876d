// `opforge chakra timeline --log LOG --npus N --npu-frequency MHZ -o OUT.json [--compat reference]`:
// an ASTRA-sim issue/callback log -> Chrome-trace JSON. Bad input (file or options): one line
// "FILE:LINE: problem" on stderr, exit status 2, no file written.
#include <cstdio>

#include "command.h"
#include "input_error.h"
#include "log_timeline.h"

namespace opf::cli {

void add_chakra_timeline_command(CLI::App& chakra) {
  auto* sub = chakra.add_subcommand("timeline", "ASTRA-sim issue/callback log -> Chrome trace / Perfetto JSON");
  struct Args {
    std::string log, out, compat;
    int64_t npus = 0, mhz = 0;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("--log", a->log, "ASTRA-sim log with issue,... / callback,... lines")->required();
  sub->add_option("--npus", a->npus, "number of NPUs in the log")->required();
  sub->add_option("--npu-frequency", a->mhz, "NPU clock in MHz (ticks are cycles)")->required();
  sub->add_option("-o,--output", a->out, "output JSON")->required();
  sub->add_option("--compat", a->compat, "'reference': the MLCommons timeline visualizer's bytes (times in ms)");
  on_run(sub, [a] {
    try {
      if (!a->compat.empty() && a->compat != "reference")
        throw chakra::InputError("--compat", "", "unknown value '" + a->compat + "' (only 'reference')");
      chakra::LogTimelineOptions o;
      o.npus = a->npus;
      o.npu_frequency_mhz = a->mhz;
      o.compat_reference = !a->compat.empty();
      chakra::log_timeline(a->log, a->out, o);
    } catch (const chakra::InputError& e) {
      std::fprintf(stderr, "opforge: %s\n", e.what());
      return 2;
    }
    return 0;
  });
}

}  // namespace opf::cli
