// Verdict of one benchmark in `opforge ab` from its paired per-round ratios head/base (each round
// times both builds back to back, order alternating, so slow drift of the machine cancels within
// a pair). Distribution-free: the median ratio with its order-statistic confidence interval
// (the binomial interval of the median: no normality, no resampling, the same answer every time).
//   SLOWER     the whole interval above 1 + threshold: significantly slower by more than the
//              threshold, not merely slower (as the baseline gate's shifted Mann-Whitney test)
//   FASTER     the whole interval below 1 / (1 + threshold)
//   SAME       median within (1 / (1 + threshold), 1 + threshold)
//   AMBIGUOUS  median beyond the threshold, interval not (noise, or too few rounds)
// An A/A run here once read 1.075 [1.007, 1.102] for one benchmark: "above 1" alone is too easy to
// reach by a process-level bias of a few per cent, and over hundreds of benchmarks it would be.
#pragma once

#include <string>
#include <vector>

namespace opf::matrix {

struct PairedVerdict {
  std::string verdict;
  double median = 1, lo = 1, hi = 1;  // median ratio and its interval
  double coverage = 0;                // the interval's exact coverage (>= 1 - alpha when achievable)
  size_t rounds = 0;
};

// Confidence interval of the median of `x` (any order): [x_(k), x_(n+1-k)] with the largest k
// whose coverage 1 - 2 P(Bin(n, 1/2) < k) is still >= 1 - alpha; [min, max] with its (lower)
// coverage when n is too small for that.
void median_interval(std::vector<double> x, double alpha, double& median, double& lo, double& hi, double& coverage);

PairedVerdict paired_verdict(const std::vector<double>& ratios, double threshold, double alpha);

}  // namespace opf::matrix
