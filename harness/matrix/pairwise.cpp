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

PairwiseResult generate_pairwise(const PairwiseProblem& p, uint64_t seed) {
  const int n = int(p.sizes.size());
  PairIndex idx(p.sizes);
  PairwiseResult res;
  res.pairs_total = idx.total;
  // 0 = uncovered, 1 = covered, 2 = infeasible
  std::vector<char> state(size_t(idx.total), 0);
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
            state[size_t(idx.at(p.sizes, a, va, b, vb))] = 2;
            ++res.pairs_infeasible;
          }
        }
  if (n == 1) {  // no pairs: one row per value
    for (int v = 0; v < p.sizes[0]; ++v) {
      std::vector<int> row{v};
      if (!violates(p, row)) res.rows.push_back(row);
    }
    return res;
  }

  std::mt19937_64 rng(seed);
  auto pick = [&](uint64_t k) { return k ? rng() % k : 0; };
  const int trials = 40;
  while (uncovered > 0) {
    std::vector<int> best;
    int64_t best_gain = -1;
    for (int t = 0; t < trials; ++t) {
      // seed pair: the first uncovered one on the first trial, a random one after
      int64_t target = -1;
      {
        int64_t skip = t == 0 ? 0 : int64_t(pick(uint64_t(uncovered)));
        for (int64_t k = 0; k < idx.total; ++k)
          if (state[size_t(k)] == 0 && skip-- == 0) {
            target = k;
            break;
          }
      }
      std::vector<int> row(size_t(n), -1);
      for (int a = 0; a < n; ++a)
        for (int b = a + 1; b < n; ++b) {
          int64_t lo = idx.base[a][b], hi = lo + int64_t(p.sizes[a]) * p.sizes[b];
          if (target >= lo && target < hi) {
            row[a] = int((target - lo) / p.sizes[b]);
            row[b] = int((target - lo) % p.sizes[b]);
          }
        }
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
            if (b != a && row[b] >= 0 && state[size_t(idx.at(p.sizes, a, v, b, row[b]))] == 0) ++gain;
          if (gain > best_v_gain) {
            best_v_gain = gain;
            best_v = v;
          }
        }
        row[a] = best_v;  // >= 0: the seed pair is feasible, so some value keeps a completion
      }
      int64_t gain = 0;
      for (int a = 0; a < n; ++a)
        for (int b = a + 1; b < n; ++b)
          if (state[size_t(idx.at(p.sizes, a, row[a], b, row[b]))] == 0) ++gain;
      if (gain > best_gain) {
        best_gain = gain;
        best = row;
      }
    }
    for (int a = 0; a < n; ++a)
      for (int b = a + 1; b < n; ++b) {
        auto& s = state[size_t(idx.at(p.sizes, a, best[a], b, best[b]))];
        if (s == 0) {
          s = 1;
          --uncovered;
        }
      }
    res.rows.push_back(best);
  }
  return res;
}

}  // namespace opf::matrix
