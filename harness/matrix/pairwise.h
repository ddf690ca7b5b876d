// Pairwise (2-way) covering arrays under constraints, greedy in the AETG style: each new row is
// the best of several randomized candidates, every candidate seeded with an uncovered pair and
// completed value by value, keeping only values for which a valid completion still exists. Pairs
// that no valid row can contain are reported as infeasible instead of being chased.
// Deterministic for a given problem (fixed-seed generator, raw mt19937 output only).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace opf::matrix {

struct PairwiseProblem {
  std::vector<int> sizes;  // number of values per axis
  // A row that contains every (axis, value) of one entry is invalid.
  std::vector<std::vector<std::pair<int, int>>> forbidden;
};

struct PairwiseResult {
  std::vector<std::vector<int>> rows;
  int64_t pairs_total = 0;       // all value pairs of distinct axes
  int64_t pairs_infeasible = 0;  // pairs no valid row can contain
};

// `row` may be partial (-1 = unassigned): true when an entry of `forbidden` is fully matched.
bool violates(const PairwiseProblem& p, const std::vector<int>& row);
// Fills the unassigned entries of `row` with a valid assignment; false when none exists.
bool complete(const PairwiseProblem& p, std::vector<int>& row);
PairwiseResult generate_pairwise(const PairwiseProblem& p, uint64_t seed = 0x5eed);

}  // namespace opf::matrix
