// `opforge run`: the main job. Builds and tests the default matrix (suites, inventory,
// benchmarks, Chakra regression in the cells that build it), then writes the report; with
// --baseline also gates the run against it.
#include <cstdio>
#include <memory>

#include "command.h"
#include "common/files.h"
#include "matrix/gate.h"
#include "matrix/load_plan.h"
#include "matrix/report.h"
#include "matrix/runner.h"

namespace opf::cli {

void add_run_command(CLI::App& app) {
  struct Args {
    std::string matrix = "matrices/default.toml", baseline, source, out;
    int jobs = 1;
    bool no_bench = false;
  };
  auto a = std::make_shared<Args>();
  auto* r = app.add_subcommand(
      "run", "The main job: default matrix, suites, Chakra regression, report (and gate with --baseline)");
  r->add_option("--matrix", a->matrix, "Matrix file (default matrices/default.toml, relative to the source tree)");
  r->add_option("--jobs,-j", a->jobs, "Cells at a time")->check(CLI::Range(1, 1024));
  r->add_flag("--no-bench", a->no_bench, "Skip the benchmarks");
  r->add_option("--baseline", a->baseline, "Gate the run against this baseline (run or opforge.baseline/1 file)");
  r->add_option("--out", a->out, "Run directory (default results/runs/<utc-stamp>-<host>)");
  r->add_option("--source", a->source, "Source tree (default: the one this opforge was built from)");
  on_run(r, [a] {
    std::string src = a->source.empty() ? matrix::default_source_dir() : a->source;
    std::string file = opf::files::exists(a->matrix) ? a->matrix : src + "/" + a->matrix;
    auto ps = matrix::load_plan(file, src);
    matrix::RunOptions o;
    o.jobs = a->jobs;
    o.run_dir = a->out;
    if (a->no_bench) o.bench = 0;
    auto sum = matrix::run_matrix(ps, o);
    std::string html = matrix::write_report(sum.run_dir);
    std::printf("run %s: %d passed, %d failed of %d cells\nreport %s\n", sum.run_dir.c_str(), sum.passed, sum.failed,
                sum.total, html.c_str());
    if (sum.interrupted) return 130;
    int rc = sum.failed ? 1 : 0;
    if (!a->baseline.empty()) {
      auto base = matrix::read_gate_input(a->baseline);
      auto cur = matrix::read_gate_input(sum.run_dir);
      auto g = matrix::run_gate(base, cur, matrix::GateConfig{});
      std::string md = matrix::gate_markdown(g, a->baseline, sum.run_dir);
      opf::files::write_atomic(sum.run_dir + "/gate.md", md);
      std::fputs(md.c_str(), stdout);
      rc = std::max(rc, g.exit_code());
    }
    return rc;
  });
}

}  // namespace opf::cli
