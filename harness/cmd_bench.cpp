// `opforge bench`: runs the benchmark suite (harness/suites/opforge-kernel-bench) and keeps its
// google-benchmark JSON under results/ (default results/bench/<utc-stamp>.json in the source
// tree), written to a temporary file and renamed only when the run succeeded.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "common/utc_time.h"
#include "opforge/build_info.h"
#include "opforge/error.h"
#include "suites/cli_filters.h"
#include "suites/suite_exe.h"

namespace opf::cli {
void add_bench_command(CLI::App& app) {
  struct Opts {
    suites::CaseFilter filter;
    std::string min_time, out, cache_dir;
    bool force = false;
    std::vector<std::string> extra;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand("bench",
                                 "Run the benchmarks (ours, peers, bandwidth probe); write google-benchmark "
                                 "JSON under results/ and print GB/s, % of triad bandwidth and ratio vs peers");
  sub->add_option("--op", o->filter.op, "only this op (manifest name)");
  sub->add_option("--backend", o->filter.backend, "only this backend (cpu, cuda, hip); peers always run");
  sub->add_option("--dtype", o->filter.dtype, "only this storage dtype (f32, f16, bf16)");
  sub->add_option("--min-time", o->min_time, "seconds per benchmark (google-benchmark --benchmark_min_time)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--out", o->out, "JSON file to write (default: <source>/results/bench/<utc-stamp>.json)");
  sub->add_flag("--force", o->force, "overwrite --out if it exists");
  sub->add_option("--cache-dir", o->cache_dir,
                  "JIT cache root (default: $OPFORGE_CACHE_DIR, $XDG_CACHE_HOME/opforge, ~/.cache/opforge)");
  sub->add_option("benchmark_args", o->extra,
                  "after --: passed to google-benchmark (e.g. -- --benchmark_repetitions=5)");
  on_run(sub, [o] {
    namespace fs = std::filesystem;
    o->filter.validate();
    const fs::path out =
        o->out.empty() ? fs::path(build::source_root()) / "results" / "bench" / (utc_compact_timestamp() + ".json")
                       : fs::absolute(o->out);
    std::error_code ec;
    if (fs::exists(out, ec) && !o->force)
      throw Error("refusing to overwrite " + out.string() + " (pass --force, or choose another --out)");
    fs::create_directories(out.parent_path(), ec);
    if (ec) throw Error("cannot create " + out.parent_path().string() + ": " + ec.message());
    const fs::path tmp = out.parent_path() / ("." + out.filename().string() + ".tmp." + std::to_string(::getpid()));

    std::vector<std::string> argv{suites::find_suite_executable("opforge-kernel-bench"),
                                  "--benchmark_filter=" + o->filter.benchmark_regex(),
                                  "--benchmark_out=" + tmp.string(), "--benchmark_out_format=json"};
    if (!o->min_time.empty()) argv.push_back("--benchmark_min_time=" + o->min_time);
    argv.insert(argv.end(), o->extra.begin(), o->extra.end());
    if (!o->cache_dir.empty()) ::setenv("OPFORGE_CACHE_DIR", o->cache_dir.c_str(), 1);

    const int rc = suites::run_child(argv);
    if (rc != 0 || !fs::is_regular_file(tmp, ec) || fs::file_size(tmp, ec) == 0) {
      fs::remove(tmp, ec);
      std::fprintf(stderr, "opforge: benchmark run failed (exit %d); nothing written to %s\n", rc, out.c_str());
      return rc != 0 ? rc : 1;
    }
    fs::rename(tmp, out, ec);
    if (ec) {
      fs::remove(tmp, ec);
      throw Error("cannot rename results into " + out.string() + ": " + ec.message());
    }
    std::printf("wrote %s\n", out.c_str());
    return 0;
  });
}

}  // namespace opf::cli
