#include "matrix/pairwise.h"

#include <algorithm>
#include <random>

namespace opf::matrix {
namespace {

bool complete_from(const PairwiseProblem& p, std::vector<int>& row, size_t axis) {
  while (axis < row.size() && row[axis] >= 0) ++axis;
  if (axis == row.size()) return !violates(p, row);
  for (int v = 0; v < p.sizes[axis]; ++v) {
    row[axis] = v;
    if (!violates(p, row) && complete_from(p, row, axis + 1)) return true;
  }
  row[axis] = -1;
  return false;
}

// Index of the pair (a, va) x (b, vb), a < b, in a flat table.
struct PairIndex {
  std::vector<std::vector<int64_t>> base;  // base[a][b]
  int64_t total = 0;
  explicit PairIndex(const std::vector<int>& sizes) {
    size_t n = sizes.size();
    base.assign(n, std::vector<int64_t>(n, -1));
    for (size_t a = 0; a < n; ++a)
      for (size_t b = a + 1; b < n; ++b) {
        base[a][b] = total;
        total += int64_t(sizes[a]) * sizes[b];
      }
  }
  int64_t at(const std::vector<int>& sizes, int a, int va, int b, int vb) const {
    if (a > b) {
      std::swap(a, b);
      std::swap(va, vb);
    }
    return base[a][b] + int64_t(va) * sizes[b] + vb;
  }
};

}  // namespace

bool violates(const PairwiseProblem& p, const std::vector<int>& row) {
  for (const auto& f : p.forbidden) {
    bool all = !f.empty();
    for (auto [axis, value] : f)
      if (row[axis] != value) {
        all = false;
        break;
      }
    if (all) return true;
  }
  return false;
}

bool complete(const PairwiseProblem& p, std::vector<int>& row) {
  if (violates(p, row)) return false;
  return complete_from(p, row, 0);
}

namespace {

// The state of every pair, in PairIndex order.
enum PairState : char { kUncovered = 0, kCovered = 1, kInfeasible = 2 };

// Raw mt19937 output only, so the rows are the same with every standard library.
struct Picker {
  std::mt19937_64 rng;
  uint64_t operator()(uint64_t k) { return k ? rng() % k : 0; }
};

// Pairs no valid row can contain are marked infeasible so that the search never chases them;
// returns how many pairs are left to cover.
int64_t mark_infeasible_pairs(const PairwiseProblem& p, const PairIndex& idx, std::vector<char>& state,
                              PairwiseResult& res) {
  const int n = int(p.sizes.size());
  int64_t uncovered = 0;
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b)
      for (int va = 0; va < p.sizes[a]; ++va)
        for (int vb = 0; vb < p.sizes[b]; ++vb) {
          std::vector<int> row(size_t(n), -1);
          row[a] = va;
          row[b] = vb;
          if (complete(p, row)) {
            ++uncovered;
          } else {
            state[size_t(idx.at(p.sizes, a, va, b, vb))] = kInfeasible;
            ++res.pairs_infeasible;
          }
        }
  return uncovered;
}

// A single axis has no pairs: one row per valid value.
void add_rows_of_single_axis(const PairwiseProblem& p, PairwiseResult& res) {
  for (int v = 0; v < p.sizes[0]; ++v) {
    std::vector<int> row{v};
    if (!violates(p, row)) res.rows.push_back(row);
  }
}

// The first uncovered pair on the first trial, a random one after; -1 when none is left.
int64_t pick_seed_pair(const PairIndex& idx, const std::vector<char>& state, int64_t uncovered, int trial,
                       Picker& pick) {
  int64_t skip = trial == 0 ? 0 : int64_t(pick(uint64_t(uncovered)));
  for (int64_t k = 0; k < idx.total; ++k)
    if (state[size_t(k)] == kUncovered && skip-- == 0) return k;
  return -1;
}

// A row with only the two values of the pair at flat index `target` assigned.
std::vector<int> row_with_seed_pair(const PairwiseProblem& p, const PairIndex& idx, int64_t target) {
  const int n = int(p.sizes.size());
  std::vector<int> row(size_t(n), -1);
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b) {
      int64_t lo = idx.base[a][b], hi = lo + int64_t(p.sizes[a]) * p.sizes[b];
      if (target >= lo && target < hi) {
        row[a] = int((target - lo) / p.sizes[b]);
        row[b] = int((target - lo) % p.sizes[b]);
      }
    }
  return row;
}

// Open axes in random order, each set to the value covering the most new pairs with the axes set
// so far, among the values that still leave a valid completion.
void assign_open_axes_greedily(const PairwiseProblem& p, const PairIndex& idx, const std::vector<char>& state,
                               std::vector<int>& row, Picker& pick) {
  const int n = int(p.sizes.size());
  std::vector<int> order;
  for (int a = 0; a < n; ++a)
    if (row[a] < 0) order.push_back(a);
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[pick(i)]);
  for (int a : order) {
    int best_v = -1;
    int64_t best_v_gain = -1;
    int start = int(pick(uint64_t(p.sizes[a])));
    for (int k = 0; k < p.sizes[a]; ++k) {
      int v = (start + k) % p.sizes[a];
      row[a] = v;
      std::vector<int> probe = row;
      if (!complete(p, probe)) continue;
      int64_t gain = 0;
      for (int b = 0; b < n; ++b)
        if (b != a && row[b] >= 0 && state[size_t(idx.at(p.sizes, a, v, b, row[b]))] == kUncovered) ++gain;
      if (gain > best_v_gain) {
        best_v_gain = gain;
        best_v = v;
      }
    }
    row[a] = best_v;  // >= 0: the seed pair is feasible, so some value keeps a completion
  }
}

int64_t count_uncovered_pairs_of_row(const PairwiseProblem& p, const PairIndex& idx, const std::vector<char>& state,
                                     const std::vector<int>& row) {
  const int n = int(p.sizes.size());
  int64_t gain = 0;
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b)
      if (state[size_t(idx.at(p.sizes, a, row[a], b, row[b]))] == kUncovered) ++gain;
  return gain;
}

// The best of several randomized candidates (AETG); the earliest one wins ties.
std::vector<int> best_candidate_row(const PairwiseProblem& p, const PairIndex& idx, const std::vector<char>& state,
                                    int64_t uncovered, Picker& pick) {
  const int trials = 40;
  std::vector<int> best;
  int64_t best_gain = -1;
  for (int t = 0; t < trials; ++t) {
    int64_t target = pick_seed_pair(idx, state, uncovered, t, pick);
    std::vector<int> row = row_with_seed_pair(p, idx, target);
    assign_open_axes_greedily(p, idx, state, row, pick);
    int64_t gain = count_uncovered_pairs_of_row(p, idx, state, row);
    if (gain > best_gain) {
      best_gain = gain;
      best = row;
    }
  }
  return best;
}

// Returns how many pairs the row newly covers.
int64_t mark_pairs_covered(const PairwiseProblem& p, const PairIndex& idx, std::vector<char>& state,
                           const std::vector<int>& row) {
  const int n = int(p.sizes.size());
  int64_t newly = 0;
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b) {
      auto& s = state[size_t(idx.at(p.sizes, a, row[a], b, row[b]))];
      if (s == kUncovered) {
        s = kCovered;
        ++newly;
      }
    }
  return newly;
}

}  // namespace

PairwiseResult generate_pairwise(const PairwiseProblem& p, uint64_t seed) {
  PairIndex idx(p.sizes);
  PairwiseResult res;
  res.pairs_total = idx.total;
  std::vector<char> state(size_t(idx.total), kUncovered);
  int64_t uncovered = mark_infeasible_pairs(p, idx, state, res);
  if (p.sizes.size() == 1) {
    add_rows_of_single_axis(p, res);
    return res;
  }
  Picker pick{std::mt19937_64(seed)};
  while (uncovered > 0) {
    std::vector<int> best = best_candidate_row(p, idx, state, uncovered, pick);
    uncovered -= mark_pairs_covered(p, idx, state, best);
    res.rows.push_back(best);
  }
  return res;
}

}  // namespace opf::matrix
