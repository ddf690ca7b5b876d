// `opforge matrix plan|run|probe`: build matrices from matrices/*.toml (see matrix/).
#include <cstdio>
#include <filesystem>
#include <memory>

#include "command.h"
#include "common/files.h"
#include "matrix/emit.h"
#include "matrix/load_plan.h"
#include "matrix/load_probe.h"
#include "matrix/progress.h"
#include "matrix/run_layout.h"
#include "matrix/runner.h"
#include "opforge/error.h"

namespace opf::cli {
namespace {
namespace fs = std::filesystem;
using namespace opf::matrix;

struct PlanArgs {
  std::string file, source, emit, out;
  bool json = false;
};

void print_plan(const Plan& p) {
  std::printf("matrix  %s\n", p.matrix_path.c_str());
  std::printf("toolchain  %s\n", p.toolchain.c_str());
  if (!p.axes.empty()) {
    std::string axes;
    for (const auto& a : p.axes) {
      std::string vals;
      for (const auto& l : a.literals) {
        if (!vals.empty()) vals += '|';
        vals += display_literal(l);
      }
      if (!axes.empty()) axes += "  ";
      axes += a.option + "(" + vals + ")";
    }
    std::printf("axes  %s\n", axes.c_str());
    int pw = 0;
    for (const auto& c : p.cells) pw += c.origin == "pairwise";
    std::printf("size  cartesian product %.0f cells; pairwise %d cells + %zu named = %zu planned", p.cartesian, pw,
                p.cells.size() - size_t(pw), p.cells.size());
    if (p.pairs_total)
      std::printf("; %lld of %lld value pairs covered (%lld infeasible under the rules)",
                  (long long)(p.pairs_total - p.pairs_infeasible), (long long)p.pairs_total,
                  (long long)p.pairs_infeasible);
    std::printf("\n");
  }
  std::printf("\n%-12s  %-22s  %-14s  %s\n", "id", "name", "origin", "options");
  for (const auto& c : p.cells)
    std::printf("%-12s  %-22s  %-14s  %s\n", c.id.c_str(), c.name.c_str(), c.origin.c_str(),
                options_summary(c.options).c_str());
  if (!p.excluded.empty()) {
    std::printf("\nexcluded (%zu):\n", p.excluded.size());
    for (const auto& e : p.excluded)
      std::printf("  %-22s  %s  [%s]\n", e.name.c_str(), e.reason.c_str(), e.where.c_str());
  }
}

int do_plan(const PlanArgs& a) {
  auto ps = load_plan(a.file, a.source);
  if (a.emit.empty()) {
    if (a.json) std::fputs(json::dump(ps.plan.to_json()).c_str(), stdout);
    else print_plan(ps.plan);
    return 0;
  }
  if (a.emit == "github") {
    std::string out = json::dump(emit_github(ps.plan, a.file));
    if (a.out.empty()) std::fputs(out.c_str(), stdout);
    else files::write_atomic(a.out, out);
    return 0;
  }
  if (a.emit == "slurm") {
    std::string dir = a.out.empty() ? "slurm-" + fs::path(a.file).stem().string() : a.out;
    dir = fs::absolute(dir).lexically_normal().string();
    if (files::exists(dir + "/cells.txt")) throw Error(dir + ": already holds an emitted plan (choose another --out)");
    std::string plan_path = dir + "/plan.json";
    files::write_atomic(plan_path, json::dump(ps.plan.to_json()));
    auto f = emit_slurm(ps.plan, plan_path, dir);
    files::write_atomic(dir + "/cells.txt", f.index);
    files::write_atomic(dir + "/matrix.sbatch", f.script, true);
    files::make_dirs(dir + "/logs");
    std::printf("%s/matrix.sbatch: %zu array tasks (index %s/cells.txt, plan %s)\n", dir.c_str(), ps.plan.cells.size(),
                dir.c_str(), plan_path.c_str());
    return 0;
  }
  throw Error("--emit " + a.emit + ": unknown target (github, slurm)");
}

struct RunArgs {
  std::string file, source, resume, out;
  std::vector<std::string> cells;
  int jobs = 1;
  bool bench = false, no_bench = false, keep_builds = false;
  double timeout_step = 0;
};

int do_run(const RunArgs& a) {
  RunOptions o;
  o.jobs = a.jobs;
  o.cells = a.cells;
  o.keep_builds = a.keep_builds;
  o.step_timeout = a.timeout_step;
  o.bench = a.bench ? 1 : a.no_bench ? 0 : -1;
  PlanSource ps;
  if (!a.resume.empty()) {
    std::string src = a.source.empty() ? default_source_dir() : a.source;
    o.run_dir = resolve_run(a.resume, src);
    o.resume = true;
    // the plan comes from the run itself; the catalog from the source tree
    std::string plan_file = o.run_dir + "/plan.json";
    ps = load_plan(plan_file, src);
  } else {
    if (a.file.empty()) throw Error("matrix run: give a matrix file (or --resume RUN)");
    ps = load_plan(a.file, a.source);
    o.run_dir = a.out;
  }
  auto sum = run_matrix(ps, o);
  std::printf("run %s: %d of %d cells passed, %d failed%s%s\n", sum.run_dir.c_str(), sum.passed,
              sum.total - sum.skipped_finished, sum.failed,
              sum.skipped_finished ? (", " + std::to_string(sum.skipped_finished) + " kept from before").c_str() : "",
              sum.interrupted ? "; INTERRUPTED (continue with --resume)" : "");
  if (sum.interrupted) return 130;
  return sum.failed ? 1 : 0;
}

}  // namespace

void add_matrix_command(CLI::App& app) {
  auto* m = app.add_subcommand("matrix", "Build matrices over Meson options: plan, run, probe");

  auto pa = std::make_shared<PlanArgs>();
  auto* plan = m->add_subcommand("plan", "Print the cells of a matrix (table, --json, or --emit github|slurm)");
  plan->add_option("file", pa->file, "matrices/<name>.toml (or a plan .json)")->required();
  plan->add_flag("--json", pa->json, "The plan as JSON (schema opforge.plan/1)");
  plan->add_option("--emit", pa->emit,
                   "Hand off to a distributed engine: github (strategy.matrix include list) or slurm (sbatch array)");
  plan->add_option("--out", pa->out, "--emit github: file to write (default stdout); --emit slurm: directory");
  plan->add_option("--source", pa->source, "Source tree to introspect (default: the one this opforge was built from)");
  on_run(plan, [pa] { return do_plan(*pa); });

  auto ra = std::make_shared<RunArgs>();
  auto* run = m->add_subcommand("run", "Build and test every cell of a matrix, recording results under results/runs/");
  run->add_option("file", ra->file, "matrices/<name>.toml or a plan .json");
  run->add_option("--jobs,-j", ra->jobs, "Cells at a time (the cores are shared among them)")
      ->check(CLI::Range(1, 1024));
  run->add_option("--resume", ra->resume, "Continue an interrupted run (directory or name under results/runs/)");
  run->add_option("--cell", ra->cells, "Run only this cell (id or name); repeatable");
  run->add_flag("--bench", ra->bench, "Run the benchmarks (default: the matrix's [run] bench)");
  run->add_flag("--no-bench", ra->no_bench, "Do not run the benchmarks");
  run->add_option("--timeout-step", ra->timeout_step,
                  "Seconds allowed to every step (default: the matrix's [run.timeouts])")
      ->check(CLI::PositiveNumber);
  run->add_option("--out", ra->out, "Run directory (default results/runs/<utc-stamp>-<host>); e.g. a per-cell bundle");
  run->add_flag("--keep-builds", ra->keep_builds, "Keep each cell's build directory");
  run->add_option("--source", ra->source, "Source tree to build (default: the one this opforge was built from)");
  on_run(run, [ra] { return do_run(*ra); });

  auto* probe = m->add_subcommand("probe", "Load every enabled op x backend of this build, cold then warm (JSON)");
  on_run(probe, [] {
    std::fputs(json::dump(run_load_probe()).c_str(), stdout);
    return 0;
  });
}

}  // namespace opf::cli
