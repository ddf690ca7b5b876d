// Seeds for the suites. One base seed per run (printed; OPFORGE_SEED replays it); each test mixes
// it with its own name, so filtering or reordering tests never changes a test's data.
#pragma once

#include <cstdint>
#include <string_view>

namespace opf::suites {

// splitmix64: tiny, fast, and identical on every platform (unlike std:: distributions).
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * 0x1p-53; }  // [0, 1)

 private:
  uint64_t s_;
};

inline uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

inline uint64_t test_seed(uint64_t base, std::string_view test_name) { return Rng(base ^ fnv1a(test_name)).next(); }

// $OPFORGE_SEED when set (decimal), else a fresh seed from the clock and the process id.
// Throws opf::Error naming the variable when it is not a number.
uint64_t base_seed_from_env(bool* from_env = nullptr);

}  // namespace opf::suites
