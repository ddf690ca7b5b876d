// `opforge chakra`: the Chakra trace toolchain (convert, validate, jsonize, simulate, regress;
// link/scale/synth come from cmd_chakra_link.cpp). Every stage reports bad input as one line
// naming the file, the position and the problem, exits non-zero and leaves no output file.
#include <malloc.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "command.h"
#include "converter.h"
#include "et_graph.h"
#include "et_load.h"
#include "et_stream.h"
#include "input_error.h"
#include "jsonizer.h"
#include "parallel_files.h"
#include "ref_log.h"
#include "regress.h"
#include "sim_timeline.h"
#include "simulator.h"
#include "string_pool.h"
#include "validator.h"

namespace opf::cli {

namespace {

using namespace opf::chakra;

bool parse_compat(const std::string& v) {
  if (v.empty()) return false;
  if (v == "reference") return true;
  throw opf::Error("--compat: unknown value '" + v + "' (only 'reference')");
}

int run_convert(const std::vector<std::string>& files, const std::string& compat, int jobs, bool simulate,
                const std::string& log) {
  bool c = parse_compat(compat);
  // The parser and encoder threads allocate little in their hot loops; one malloc arena keeps
  // per-thread arenas from adding megabytes of peak RSS to a 27k-node conversion.
  mallopt(M_ARENA_MAX, 1);
  if (files.size() % 2 != 0) throw opf::Error("chakra convert: expected IN OUT pairs, got an odd number of paths");
  size_t pairs = files.size() / 2;
  std::mutex io;
  std::vector<std::string> errors(pairs);
  const unsigned parser_threads = parser_threads_per_file(resolve_jobs(jobs, pairs));
  for_each_file(pairs, jobs, [&](size_t k) {
    ConvertOptions o;
    o.compat_reference = c;
    o.parser_threads = parser_threads;
    o.simulate = simulate;
    if (!log.empty()) o.log_path = pairs == 1 ? log : log + "." + std::to_string(k);
    o.warn = [&](const std::string& w) {
      std::lock_guard<std::mutex> g(io);
      std::fprintf(stderr, "opforge: warning: %s\n", w.c_str());
    };
    o.sim_line = [&](const std::string& l) {
      std::lock_guard<std::mutex> g(io);
      std::printf("%s\n", l.c_str());
    };
    try {
      convert(files[2 * k], files[2 * k + 1], o);
    } catch (const std::exception& e) {
      errors[k] = e.what();
    }
  });
  int rc = 0;
  for (const auto& e : errors)
    if (!e.empty()) {
      std::fprintf(stderr, "opforge: %s\n", e.c_str());
      rc = 1;
    }
  return rc;
}

// Files are checked in parallel; each one's report is buffered and printed in input order, so
// the output does not depend on -j.
int run_validate(const std::vector<std::string>& files, const std::string& compat, int jobs) {
  bool c = parse_compat(compat);
  struct Report {
    std::string out, err;
    bool failed = false;
  };
  std::vector<Report> reports(files.size());
  for_each_file(files.size(), jobs, [&](size_t k) {
    const std::string& f = files[k];
    Report& r = reports[k];
    LoadedEt et;
    try {
      load_et(f, c, et);
    } catch (const std::exception& e) {
      r.err = std::string("opforge: ") + e.what() + "\n";
      r.failed = true;
      return;
    }
    size_t errors = 0, warnings = 0;
    auto report = [&](const Issue& is) {
      r.err += f + ": " + is.where + ": " + (is.error ? "error" : "warning") + ": " + is.problem + "\n";
      (is.error ? errors : warnings)++;
    };
    for (const auto& p : et.type_problems) report({true, "nodes", p});
    for (const auto& is : validate_metadata(et.meta)) report(is);
    for (const auto& is : validate_graph(et.nodes)) report(is);
    r.out = f + ": " + std::to_string(et.nodes.size()) + " nodes, " + std::to_string(errors) + " errors, " +
            std::to_string(warnings) + " warnings\n";
    r.failed = errors > 0;
  });
  int rc = 0;
  for (const Report& r : reports) {
    std::fputs(r.err.c_str(), stderr);
    std::fputs(r.out.c_str(), stdout);
    std::fflush(stdout);
    if (r.failed) rc = 1;
  }
  return rc;
}

// --timeline: every file is simulated on its own (as without it) and becomes one process of
// the trace; the log lines are not printed then (the timeline is the output).
int run_simulate_timeline(const std::vector<std::string>& files, bool compat, const std::string& out) {
  std::vector<LoadedEt> ets(files.size());
  std::vector<RankGraph> ranks;
  try {
    for (size_t k = 0; k < files.size(); ++k) {
      load_et(files[k], compat, ets[k]);
      for (const auto& is : validate_graph(ets[k].nodes))
        if (is.error) throw InputError(files[k], is.where, is.problem);
      ranks.push_back({files[k], rank_of_path(files[k], int64_t(k)), &ets[k]});
    }
    write_sim_timeline(ranks, out);
  } catch (const InputError& e) {
    std::fprintf(stderr, "opforge: %s\n", e.what());
    return 2;
  }
  return 0;
}

int run_simulate(const std::vector<std::string>& files, const std::string& compat, const std::string& log_path,
                 const std::string& timeline) {
  bool c = parse_compat(compat);
  if (!timeline.empty()) return run_simulate_timeline(files, c, timeline);
  if (files.size() != 1) throw opf::Error("chakra simulate: one .et file (several only with --timeline)");
  const std::string& in = files[0];
  LoadedEt et;
  load_et(in, c, et);
  for (const auto& is : validate_graph(et.nodes))
    if (is.error) throw InputError(in, is.where, is.problem);
  RefLog log(log_path);
  if (log.enabled()) log.debug("Simulating execution of Chakra nodes based on data dependencies.");
  std::string buf;
  simulate(et.nodes, [&](const std::string& l) {
    if (log.enabled()) {
      log.debug(l);
    } else {
      buf += l;
      buf.push_back('\n');
      if (buf.size() > (1 << 16)) {
        std::fwrite(buf.data(), 1, buf.size(), stdout);
        buf.clear();
      }
    }
  });
  std::fwrite(buf.data(), 1, buf.size(), stdout);
  return 0;
}

}  // namespace

void add_chakra_command(CLI::App& app) {
  auto* chakra = app.add_subcommand("chakra", "Chakra execution traces: convert, validate, jsonize, simulate, link");
  chakra->require_subcommand(1);

  {
    auto* sub = chakra->add_subcommand("convert", "PyTorch host ET / linked JSON -> Chakra .et (IN OUT [IN OUT ...])");
    auto files = std::make_shared<std::vector<std::string>>();
    auto compat = std::make_shared<std::string>();
    auto jobs = std::make_shared<int>(0);
    auto sim = std::make_shared<bool>(false);
    auto log = std::make_shared<std::string>();
    sub->add_option("files", *files, "IN OUT pairs (.json or .json.gz in; OUT ending in .gz is gzip-compressed)")
        ->required();
    sub->add_option("--compat", *compat, "'reference': reproduce the MLCommons converter byte for byte, bugs included");
    sub->add_option("-j,--jobs", *jobs, "convert this many pairs in parallel (default: one per core)");
    sub->add_flag("--simulate", *sim, "run the reference's simple simulation after writing (log lines)");
    sub->add_option("--log", *log, "write the reference-format debug log here (per pair: FILE.<k> when several)");
    on_run(sub, [=] { return run_convert(*files, *compat, *jobs, *sim, *log); });
  }
  {
    auto* sub = chakra->add_subcommand("validate", "Check .et files: metadata, duplicate ids, dangling deps, cycles");
    auto files = std::make_shared<std::vector<std::string>>();
    auto compat = std::make_shared<std::string>();
    sub->add_option("files", *files, ".et files")->required();
    auto jobs = std::make_shared<int>(0);
    sub->add_option("--compat", *compat, "'reference': a size-0 record ends the stream, as in the reference reader");
    sub->add_option("-j,--jobs", *jobs, "check this many files in parallel (default: one per core)");
    on_run(sub, [=] { return run_validate(*files, *compat, *jobs); });
  }
  {
    auto* sub = chakra->add_subcommand("jsonize", "Chakra .et -> JSON (the reference jsonizer's layout)");
    auto in = std::make_shared<std::string>();
    auto out = std::make_shared<std::string>();
    auto compat = std::make_shared<std::string>();
    sub->add_option("in", *in, ".et file")->required();
    sub->add_option("out", *out, "JSON output")->required();
    sub->add_option("--compat", *compat, "'reference': a size-0 record ends the stream");
    on_run(sub, [=] {
      jsonize(*in, *out, parse_compat(*compat));
      return 0;
    });
  }
  {
    auto* sub = chakra->add_subcommand("simulate", "Event-driven replay of the reference --simulate on an .et file");
    auto in = std::make_shared<std::vector<std::string>>();
    auto compat = std::make_shared<std::string>();
    auto log = std::make_shared<std::string>();
    auto timeline = std::make_shared<std::string>();
    sub->add_option("in", *in, ".et file (with --timeline: one per rank, PREFIX.<rank>.et)")->required();
    sub->add_option("--compat", *compat, "'reference': a size-0 record ends the stream");
    sub->add_option("--log", *log, "write reference-format log lines here instead of stdout");
    sub->add_option("--timeline", *timeline,
                    "write the schedule as Chrome-trace / Perfetto JSON (µs) instead of log lines");
    on_run(sub, [=] { return run_simulate(*in, *compat, *log, *timeline); });
  }
  {
    auto* sub = chakra->add_subcommand("regress", "Convert + jsonize every usable trace and compare with the goldens");
    auto update = std::make_shared<bool>(false);
    auto traces = std::make_shared<std::string>();
    auto golden = std::make_shared<std::string>();
    sub->add_flag("--update", *update, "rewrite the golden files and print what changed");
    sub->add_option("--traces", *traces, "trace corpus (default: chakra/tests/data/traces in the source tree)");
    sub->add_option("--golden", *golden, "golden dir (default: chakra/tests/golden in the source tree)");
    on_run(sub, [=] {
      RegressOptions o;
      o.update = *update;
      o.traces_dir = traces->empty() ? default_traces_dir() : *traces;
      o.golden_dir = golden->empty() ? default_golden_dir() : *golden;
      return run_regress(o, [](const std::string& l) { std::printf("%s\n", l.c_str()); }) ? 0 : 1;
    });
  }
  add_chakra_link_commands(*chakra);
  add_chakra_text_command(*chakra);
  add_chakra_generate_command(*chakra);
  add_chakra_visualize_command(*chakra);
  add_chakra_timeline_command(*chakra);
}

}  // namespace opf::cli
