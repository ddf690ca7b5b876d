// Deterministic synthetic timings for the gate tests: a known truth (same distribution, or a
// known slowdown) so the expected verdict is not taken from the code under test.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace opf::testing {

// Normal(mean, sd) samples from a fixed-seed mt19937_64 via Box-Muller (portable across libstdc++ versions).
inline std::vector<double> normal_samples(uint64_t seed, int n, double mean, double sd) {
  std::mt19937_64 rng(seed);
  auto uni = [&] { return (double(rng() >> 11) + 0.5) / 9007199254740992.0; };
  std::vector<double> out;
  while (int(out.size()) < n) {
    double u1 = uni(), u2 = uni();
    double r = std::sqrt(-2 * std::log(u1));
    out.push_back(mean + sd * r * std::cos(2 * M_PI * u2));
    if (int(out.size()) < n) out.push_back(mean + sd * r * std::sin(2 * M_PI * u2));
  }
  return out;
}

}  // namespace opf::testing
