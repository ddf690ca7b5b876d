// `opforge test`: runs the kernel correctness suite (harness/suites/opforge-kernel-tests) with a
// GoogleTest filter composed from --op/--backend/--dtype; --seed replays a run's data.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "suites/cli_filters.h"
#include "suites/suite_exe.h"

namespace opf::cli {

void add_test_command(CLI::App& app) {
  struct Opts {
    suites::CaseFilter filter;
    std::string seed, cache_dir;
    std::vector<std::string> extra;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand("test",
                                 "Run the kernel correctness suite: every op x backend x dtype x entry x case "
                                 "against the float64 reference");
  sub->add_option("--op", o->filter.op, "only this op (manifest name)");
  sub->add_option("--backend", o->filter.backend, "only this backend (cpu, cuda, hip)");
  sub->add_option("--dtype", o->filter.dtype, "only this storage dtype (f32, f16, bf16)");
  sub->add_option("--seed", o->seed, "base seed to replay (the suite prints it; default: fresh)")
      ->check(CLI::Range(uint64_t(0), UINT64_MAX));
  sub->add_option("--cache-dir", o->cache_dir,
                  "JIT cache root (default: $OPFORGE_CACHE_DIR, $XDG_CACHE_HOME/opforge, ~/.cache/opforge)");
  sub->add_option("gtest_args", o->extra, "after --: passed to GoogleTest (e.g. -- --gtest_repeat=3)");
  on_run(sub, [o] {
    o->filter.validate();
    std::vector<std::string> argv{suites::find_suite_executable("opforge-kernel-tests"),
                                  "--gtest_filter=" + o->filter.gtest_filter()};
    argv.insert(argv.end(), o->extra.begin(), o->extra.end());
    if (!o->seed.empty()) ::setenv("OPFORGE_SEED", o->seed.c_str(), 1);
    if (!o->cache_dir.empty()) ::setenv("OPFORGE_CACHE_DIR", o->cache_dir.c_str(), 1);
    return suites::run_child(argv);
  });
}

}  // namespace opf::cli
