// Loads one op module in a fresh process and prints what the loader did, so the JIT behaviour
// tests can race, kill and inspect separate processes.
//   jit_load_helper <op> [backend] [--run]
// stdout: compiles=N hits=N waits=N prebuilt=N source=S path=P [run=R]; errors: stderr, exit 1.
#include <cstdio>
#include <cstring>
#include <string>

#include "opforge/error.h"
#include "opforge/loader.h"
#include "opforge/manifest.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: jit_load_helper <op> [backend] [--run]\n");
    return 2;
  }
  const std::string backend = argc > 2 && argv[2][0] != '-' ? argv[2] : "cpu";
  const bool run = argc > 2 && std::strcmp(argv[argc - 1], "--run") == 0;
  try {
    const opf::OpInfo* op = opf::find_op(argv[1]);
    if (!op) throw opf::Error(std::string("unknown op '") + argv[1] + "'");
    auto& loader = opf::Loader::instance();
    const opf::LoadedModule& m = loader.load(*op, backend);
    const opf::LoaderStats s = loader.stats();
    std::printf("compiles=%d hits=%d waits=%d prebuilt=%d source=%s path=%s", s.compiles, s.cache_hits, s.lock_waits,
                s.prebuilt_loads, std::string(opf::module_source_name(m.source)).c_str(), m.path.c_str());
    if (run) {
      // the tests' synthetic modules return a value compiled in from a local header
      opf_call call{"forward", nullptr, 0, nullptr, 0, nullptr, nullptr};
      char err[256] = {0};
      std::printf(" run=%d", m.info->run(m.info, &call, err, sizeof err));
    }
    std::printf("\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
