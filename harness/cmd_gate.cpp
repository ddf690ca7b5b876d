// `opforge gate`: compare a run with a baseline; exit 0 nothing regressed, 1 a confirmed
// regression, 2 usage or input errors (see matrix/gate.h for the rules).
#include <cstdio>
#include <memory>

#include "command.h"
#include "common/files.h"
#include "matrix/gate.h"
#include "matrix/load_plan.h"
#include "matrix/run_layout.h"
#include "opforge/error.h"

namespace opf::cli {
namespace {
using namespace opf::matrix;

struct GateArgs {
  std::string baseline, current, overrides, markdown, write_baseline, source;
  std::string timing = "gate";
  double threshold = 0.05, alpha = 0.05, instr_threshold = 0.01;
};

// A run name resolves under results/runs/; a path (file or directory) is taken as is.
std::string locate(const std::string& arg, const std::string& source) {
  if (files::exists(arg)) return arg;
  return resolve_run(arg, source.empty() ? default_source_dir() : source);
}

int do_gate(const GateArgs& a) {
  try {
    if (a.current.empty()) throw Error("gate: --current RUN is required");
    if (!(a.threshold > 0 && a.threshold < 1) || !(a.alpha > 0 && a.alpha < 1) || !(a.instr_threshold >= 0))
      throw Error("gate: --threshold and --alpha must be fractions in (0, 1)");
    auto cur = read_gate_input(locate(a.current, a.source));
    if (!a.write_baseline.empty()) {
      if (files::exists(a.write_baseline))
        throw Error(a.write_baseline + ": exists; not overwriting a baseline (remove it first)");
      files::write_atomic(a.write_baseline, json::dump(baseline_json(cur)));
      std::printf("%s: baseline with %zu benchmarks, %zu tests, %zu Chakra traces, %zu instruction counts\n",
                  a.write_baseline.c_str(), cur.bench.size(), cur.tests.size(), cur.chakra.size(), cur.instr.size());
      return 0;
    }
    if (a.baseline.empty()) throw Error("gate: --baseline RUN|FILE is required");
    auto base = read_gate_input(locate(a.baseline, a.source));
    GateConfig cfg;
    cfg.threshold = a.threshold;
    cfg.alpha = a.alpha;
    cfg.instr_threshold = a.instr_threshold;
    if (a.timing != "gate" && a.timing != "advisory")
      throw Error("--timing '" + a.timing + "': use 'gate' or 'advisory'");
    cfg.timing_gates = a.timing == "gate";
    if (!a.overrides.empty()) cfg.overrides = read_overrides(a.overrides);
    if (base.bench.empty() && base.tests.empty() && base.chakra.empty() && base.instr.empty())
      throw Error(a.baseline + ": the baseline holds no benchmarks, tests, Chakra results or instruction counts");
    auto report = run_gate(base, cur, cfg);
    std::string md = gate_markdown(report, a.baseline, a.current);
    if (!a.markdown.empty()) files::write_atomic(a.markdown, md);
    std::fputs(md.c_str(), stdout);
    return report.exit_code();
  } catch (const Error& e) {
    std::fprintf(stderr, "opforge gate: %s\n", e.what());
    return 2;
  }
}

}  // namespace

void add_gate_command(CLI::App& app) {
  auto a = std::make_shared<GateArgs>();
  auto* g =
      app.add_subcommand("gate", "Compare a run with a baseline: exit 0 same, 1 confirmed regression, 2 bad input");
  g->add_option("--baseline", a->baseline,
                "Baseline run (directory or name under results/runs/) or opforge.baseline/1 file");
  g->add_option("--current", a->current, "Current run (directory or name) or baseline-format file");
  g->add_option("--threshold", a->threshold, "Relative change that matters (default 0.05 = 5 %)");
  g->add_option("--alpha", a->alpha, "Significance level of the Mann-Whitney U test (default 0.05)");
  g->add_option("--instr-threshold", a->instr_threshold, "Relative instruction-count change that fails (default 0.01)");
  g->add_option("--timing", a->timing,
                "gate (default): SLOWER fails; advisory: timing reported only (noisy shared runners)");
  g->add_option("--overrides", a->overrides, "TOML file of per-benchmark thresholds / ignores ([[override]])");
  g->add_option("--markdown", a->markdown, "Also write the Markdown summary here");
  g->add_option("--write-baseline", a->write_baseline, "Write --current as an opforge.baseline/1 file and exit");
  g->add_option("--source", a->source, "Source tree whose results/runs/ names resolve (default: this opforge's)");
  on_run(g, [a] { return do_gate(*a); });
}

}  // namespace opf::cli
