// `opforge ab`: A/B of two builds on this machine, benchmarks interleaved (matrix/ab.h).
// Exit 0 no regression, 1 a confirmed regression, 2 bad input or a build that failed.
#include <cstdio>
#include <memory>

#include "command.h"
#include "matrix/ab.h"
#include "opforge/error.h"

namespace opf::cli {
namespace {

bool split_env(const std::string& kv, std::pair<std::string, std::string>& out) {
  const size_t eq = kv.find('=');
  if (eq == 0 || eq == std::string::npos) return false;
  out = {kv.substr(0, eq), kv.substr(eq + 1)};
  return true;
}

}  // namespace

void add_ab_command(CLI::App& app) {
  struct Args {
    matrix::AbOptions o;
    std::vector<std::string> base_env, head_env;
    bool no_instructions = false, no_restage = false, no_confirm = false;
  };
  auto a = std::make_shared<Args>();
  auto* sub =
      app.add_subcommand("ab",
                         "A/B two builds on this machine: benchmarks interleaved round by round, paired verdicts; "
                         "exit 0 same, 1 confirmed regression, 2 bad input");
  sub->add_option("--base", a->o.base, "Base: a git revision, a source directory or a build directory")->required();
  sub->add_option("--head", a->o.head, "Head: a git revision, a source directory or a build directory")->required();
  sub->add_option("--out", a->o.out, "Directory for ab.json, ab.md, logs and the builds (reused by later runs)")
      ->required();
  sub->add_option("--op", a->o.ops, "Only this op (repeatable); the builds enable only these ops");
  sub->add_option("--filter", a->o.filter,
                  "Only benchmarks whose name matches this regex (the probes always run, as controls)");
  sub->add_flag("--with-peers", a->o.peers, "Also time the peer libraries (controls: the same code in both builds)");
  sub->add_option("--rounds", a->o.rounds, "Paired rounds per benchmark (default 10)");
  sub->add_option("--repeat", a->o.repeat,
                  "Independent runs, each in its own pair of processes: a verdict per benchmark per run "
                  "(false-alarm studies; default 1)");
  sub->add_option("--block-seconds", a->o.block_seconds,
                  "Each timed block runs the kernel for at least this long (default 0.1)");
  sub->add_option("--threshold", a->o.threshold, "Relative change that matters (default 0.05)");
  sub->add_option("--alpha", a->o.alpha, "1 - coverage of the median ratio's interval (default 0.05)");
  sub->add_option("--instr-threshold", a->o.instr_threshold,
                  "Relative instruction-count change that fails (default 0.01)");
  sub->add_flag("--no-instructions", a->no_instructions, "Skip the callgrind instruction counts");
  sub->add_flag("--no-restage", a->no_restage,
                "Keep each case's buffers for all rounds (default: new buffers every round, "
                "so a process's page placement is noise, not a bias)");
  sub->add_flag("--no-confirm", a->no_confirm,
                "Keep a SLOWER verdict without confirming it in a second pair of processes (default: confirm)");
  sub->add_option("--repo", a->o.repo, "Git repository revisions are read from (default: this opforge's source tree)");
  sub->add_option("-D", a->o.meson_options, "Extra Meson option for both builds (KEY=VALUE, repeatable)");
  sub->add_option("--base-env", a->base_env, "KEY=VALUE for the base build's benchmark process (repeatable)");
  sub->add_option("--head-env", a->head_env,
                  "KEY=VALUE for the head build's benchmark process (repeatable; e.g. "
                  "OPFORGE_AB_SLOWDOWN='rms_norm/=0.10' to calibrate)");
  sub->add_flag("--force", a->o.force, "Replace an existing OUT/ab.json");
  sub->add_flag("--no-build", a->o.no_build, "Use build directories as they are (no ninja run in them)");
  sub->add_flag("--skip-identical", a->o.skip_identical,
                "Do not time the benchmarks of an op whose CPU module is byte-identical in both builds "
                "(listed in ab.json as not timed; instruction counts still run)");
  on_run(sub, [a] {
    try {
      for (auto [from, to] : {std::pair{&a->base_env, &a->o.base_env}, std::pair{&a->head_env, &a->o.head_env}})
        for (const std::string& kv : *from) {
          std::pair<std::string, std::string> p;
          if (!split_env(kv, p)) throw Error("--base-env/--head-env: expected KEY=VALUE, got '" + kv + "'");
          to->push_back(p);
        }
      a->o.instructions = !a->no_instructions;
      a->o.restage = !a->no_restage;
      a->o.confirm = !a->no_confirm;
      return matrix::run_ab(a->o);
    } catch (const Error& e) {
      std::fprintf(stderr, "opforge ab: %s\n", e.what());
      return 2;
    }
  });
}

}  // namespace opf::cli
