// opforge — build matrices, kernel correctness/performance suites, Chakra trace tools.
#include <cstdio>
#include <exception>
#include <map>

#include "command.h"
#include "opforge/error.h"

namespace opf::cli {
namespace {
std::map<CLI::App*, std::function<int()>>& actions() {
  static std::map<CLI::App*, std::function<int()>> a;
  return a;
}
}  // namespace

void on_run(CLI::App* sub, std::function<int()> run) { actions()[sub] = std::move(run); }

}  // namespace opf::cli

namespace {

int run_cli(int argc, char** argv) {
  CLI::App app{"opforge: build matrices, kernel suites and Chakra trace tools"};
  app.require_subcommand(1);
  app.fallthrough(false);
  using namespace opf::cli;
  add_ops_command(app);
  add_op_command(app);
  add_clean_command(app);
  add_test_command(app);
  add_bench_command(app);
  add_matrix_command(app);
  add_gate_command(app);
  add_ab_command(app);
  add_report_command(app);
  add_merge_command(app);
  add_run_command(app);
#ifdef OPF_HAVE_CHAKRA
  add_chakra_command(app);
#endif
  // CLI11 reports a mistyped command as "A subcommand is required": name the word instead
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    for (const auto* sub : app.get_subcommands([](CLI::App*) { return true; })) known |= sub->check_name(argv[1]);
    if (!known) {
      std::fprintf(stderr, "opforge: unknown command '%s' (see --help)\n", argv[1]);
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print and exit 0; a usage error is bad input: one line, exit 2
    // (CLI11's own exit prints a second "Run with --help" line and exits 105-109)
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "opforge: %s (see --help)\n", e.what());
    return 2;
  }
  try {
    // deepest parsed subcommand with an action wins (e.g. `chakra convert`)
    CLI::App* cur = &app;
    std::function<int()>* action = nullptr;
    while (true) {
      auto subs = cur->get_subcommands();
      if (subs.empty()) break;
      cur = subs.front();
      auto it = actions().find(cur);
      if (it != actions().end()) action = &it->second;
    }
    if (!action) {
      std::fprintf(stderr, "opforge: %s needs a subcommand (see --help)\n", cur->get_name().c_str());
      return 2;
    }
    return (*action)();
  } catch (const opf::Error& e) {
    std::fprintf(stderr, "opforge: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {  // filesystem errors, bad_alloc: one line, not an abort
    std::fprintf(stderr, "opforge: %s\n", e.what());
    return 1;
  }
}

}  // namespace

// Nothing escapes as an abort: building the command tree can throw too (bad_alloc)
int main(int argc, char** argv) {
  try {
    return run_cli(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "opforge: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "opforge: unknown exception\n");
  }
  return 1;
}
