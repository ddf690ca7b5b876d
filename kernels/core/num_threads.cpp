// The default thread count, apart from the pool: the harness records it (opforge ab, matrix runs)
// without linking the loader (opf_build_facts, kernels/meson.build).
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include "opforge/error.h"
#include "opforge/threads.h"

namespace opf {
namespace {

int cores_available() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

int default_num_threads() {
  static const int n = [] {
    const char* e = std::getenv("OPFORGE_NUM_THREADS");
    if (!e || !*e) return cores_available();
    char* end = nullptr;
    const long v = std::strtol(e, &end, 10);
    if (end == e || *end || v < 1 || v > 4096)
      throw Error(std::string("OPFORGE_NUM_THREADS='") + e + "' is not a thread count (an integer >= 1)");
    return int(v);
  }();
  return n;
}

}  // namespace opf
