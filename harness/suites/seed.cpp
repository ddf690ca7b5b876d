#include "seed.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "opforge/error.h"

namespace opf::suites {

uint64_t base_seed_from_env(bool* from_env) {
  const char* env = std::getenv("OPFORGE_SEED");
  if (from_env) *from_env = env && *env;
  if (env && *env) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(env, &end, 10);
    if (*end != '\0' || errno != 0 || env[0] == '-')
      throw Error("OPFORGE_SEED='" + std::string(env) + "' is not an unsigned decimal number");
    return v;
  }
  // 32 bits: short enough to retype from a log
  const auto t = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  return Rng(t ^ (uint64_t(getpid()) << 32)).next() & 0xffffffffull;
}

}  // namespace opf::suites
