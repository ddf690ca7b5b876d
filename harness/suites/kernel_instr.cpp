// Instruction-count driver for `opforge matrix run` (the callgrind step): meant to run under
// `valgrind --tool=callgrind --collect-atstart=no`. For every cpu-backend op x dtype x entry it
// stages the op's first manifest `cases` shape (fixed data: seed from the case name), calls the
// kernel once outside the count (lazy init, first touch), then --calls more times with collection
// toggled on around the kernel call only, and dumps one profile per case named by the case
// (`<op>/cpu/<dtype>/<entry>/<shape>`). Setup, data drawing and inout restores are not counted.
// Outside valgrind the client requests are no-ops, so the driver doubles as a quick smoke run.
#include <valgrind/callgrind.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "case_data.h"
#include "case_name.h"
#include "opforge/error.h"
#include "opforge/loader.h"
#include "seed.h"
#include "staged_case.h"

namespace opf::suites {
namespace {

// Returns false when the case could not run (the message is printed).
bool count_case(const OpInfo& op, const std::string& dt, const std::string& entry, int calls) {
  const Shape& shape = op.cases.front();
  const std::string name = case_name(op.name, "cpu", dt, entry, shape);
  try {
    DrawnCase drawn = draw_case(op, entry, *dtype_from_name(dt), shape, Variant::random, fnv1a(name), false);
    if (!drawn.desc.unsupported.empty()) {
      std::printf("skip %s: %s\n", name.c_str(), drawn.desc.unsupported.c_str());
      return true;
    }
    Loader& loader = Loader::instance();
    const opf_module_info* module = loader.load(op, "cpu").info;
    StagedCase staged(loader.device("cpu"), op, drawn, 1);  // one thread: counts independent of the machine
    staged.run(module);                                     // warm-up, not counted
    const bool restore = staged.has_inouts();
    CALLGRIND_ZERO_STATS;
    for (int i = 0; i < calls; ++i) {
      if (restore) staged.restore_inouts();
      CALLGRIND_TOGGLE_COLLECT;
      staged.run(module);
      CALLGRIND_TOGGLE_COLLECT;
    }
    CALLGRIND_DUMP_STATS_AT(name.c_str());
    std::printf("case %s\n", name.c_str());
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "opforge-kernel-instr: %s: %s\n", name.c_str(), e.what());
    return false;
  }
}

}  // namespace
}  // namespace opf::suites

int main(int argc, char** argv) {
  using namespace opf::suites;
  int calls = 10;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a.rfind("--calls=", 0) == 0 && std::atoi(argv[i] + 8) > 0) {
      calls = std::atoi(argv[i] + 8);
    } else {
      std::fprintf(
          stderr,
          "usage: opforge-kernel-instr [--calls=N]   (run under valgrind --tool=callgrind --collect-atstart=no)\n");
      return 2;
    }
  }
  std::printf("calls %d\n", calls);
  int failed = 0;
  for (const opf::OpInfo& op : opf::op_table()) {
    bool has_cpu = false;
    for (const std::string& b : op.enabled_backends) has_cpu = has_cpu || b == "cpu";
    if (!has_cpu || op.cases.empty()) continue;
    for (const std::string& dt : op.dtypes)
      for (const opf::EntryInfo& entry : op.entries) failed += !count_case(op, dt, entry.name, calls);
  }
  return failed ? 1 : 0;
}
