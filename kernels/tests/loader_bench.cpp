// What a module load costs, per path (google-benchmark; names loader/<what>/<op>):
//   loader/key/<op>                 computing the JIT cache key (read + hash sources and headers)
//   loader/jit_cache/<op>           Loader::load of a cached entry in a warm process (key + sidecar
//                                   check + SHA-256 of the artefact; dlopen already done)
//   loader/process_prebuilt/<op>    a fresh process that loads the prebuilt module (spawn included)
//   loader/process_jit_cache/<op>   a fresh process that loads the cached JIT module
// The process pair differs only in the load path, so their difference is the loader's cost.
// The cache is filled (at most one compile per op) before timing.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/jit_cache.h"
#include "opforge/build_info.h"
#include "opforge/loader.h"

extern char** environ;

namespace opf {
namespace {

void run_helper(const std::string& op, bool force_jit, benchmark::State& state) {
  const char* helper = std::getenv("OPFORGE_JIT_HELPER");
  if (force_jit) ::setenv("OPFORGE_FORCE_JIT", "1", 1);
  else ::unsetenv("OPFORGE_FORCE_JIT");
  std::vector<std::string> args{helper, op, "cpu"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  if (posix_spawn(&pid, helper, &fa, nullptr, argv.data(), environ) != 0) {
    state.SkipWithError("cannot spawn jit_load_helper");
    return;
  }
  posix_spawn_file_actions_destroy(&fa);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) state.SkipWithError("jit_load_helper failed");
}

void register_all() {
  for (const auto& op : op_table()) {
    if (!op.has_backend("cpu")) continue;
    const std::string name = op.name;
    benchmark::RegisterBenchmark(("loader/key/" + name).c_str(), [&op](benchmark::State& st) {
      auto be = detail::make_cpu_backend();
      const std::string k = build::source_root() + "/kernels";
      detail::JitSource src{k + "/ops/" + op.name + "/cpu.cpp", {k + "/include", k}, {}};
      for (auto _ : st) benchmark::DoNotOptimize(detail::jit::compute_key(op, *be, src));
    });
    benchmark::RegisterBenchmark(("loader/jit_cache/" + name).c_str(), [&op](benchmark::State& st) {
      ::setenv("OPFORGE_FORCE_JIT", "1", 1);
      const int before = Loader::instance().stats().compiles;
      for (auto _ : st) {
        Loader::instance().forget();
        benchmark::DoNotOptimize(Loader::instance().load(op, "cpu").info);
      }
      if (Loader::instance().stats().compiles != before) st.SkipWithError("a timed load compiled");
    });
    if (op.is_prebuilt("cpu"))
      benchmark::RegisterBenchmark(("loader/process_prebuilt/" + name).c_str(),
                                   [name](benchmark::State& st) {
                                     for (auto _ : st) run_helper(name, false, st);
                                   })
          ->Unit(benchmark::kMillisecond)
          ->Iterations(20);
    benchmark::RegisterBenchmark(("loader/process_jit_cache/" + name).c_str(),
                                 [name](benchmark::State& st) {
                                   for (auto _ : st) run_helper(name, true, st);
                                 })
        ->Unit(benchmark::kMillisecond)
        ->Iterations(20);
  }
}

}  // namespace
}  // namespace opf

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (!std::getenv("OPFORGE_JIT_HELPER")) {
    std::fprintf(stderr, "loader_bench: OPFORGE_JIT_HELPER is not set (meson test --benchmark sets it)\n");
    return 2;
  }
  // meson points OPFORGE_CACHE_DIR at the build tree's JIT cache (shared with the suites, so
  // the warm-up compiles at most once per build); otherwise a private temporary one
  char tmpl[] = "/tmp/opforge-loader-bench-XXXXXX";
  const bool own_cache = !std::getenv("OPFORGE_CACHE_DIR");
  if (own_cache) {
    if (!::mkdtemp(tmpl)) return 2;
    ::setenv("OPFORGE_CACHE_DIR", tmpl, 1);
  }
  ::unsetenv("OPFORGE_SOURCE_DIR");
  // fill the cache outside the timed loops (one compile per op)
  ::setenv("OPFORGE_FORCE_JIT", "1", 1);
  for (const auto& op : opf::op_table())
    if (op.has_backend("cpu")) {
      const auto& m = opf::Loader::instance().load(op, "cpu");
      std::fprintf(stderr, "loader_bench: %s %s in %.2f s\n", op.name.c_str(),
                   std::string(opf::module_source_name(m.source)).c_str(), m.load_seconds);
    }
  benchmark::Initialize(&argc, argv);
  opf::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (own_cache) fs::remove_all(tmpl);
  return 0;
}
