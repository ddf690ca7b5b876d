#include "matrix/paired_verdict.h"

#include <algorithm>
#include <cmath>

namespace opf::matrix {

namespace {
// P(Bin(n, 1/2) <= k)
double binom_half_cdf(size_t n, size_t k) {
  double sum = 0, term = std::pow(0.5, double(n));  // C(n, 0) / 2^n
  for (size_t i = 0; i <= k && i <= n; ++i) {
    sum += term;
    term = term * double(n - i) / double(i + 1);
  }
  return sum;
}
}  // namespace

void median_interval(std::vector<double> x, double alpha, double& median, double& lo, double& hi, double& coverage) {
  std::sort(x.begin(), x.end());
  const size_t n = x.size();
  if (n == 0) {
    median = lo = hi = NAN;
    coverage = 0;
    return;
  }
  median = n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
  size_t k = 1;  // 1-based order statistic of the lower end
  while (k + 1 <= n / 2 && 1 - 2 * binom_half_cdf(n, k) >= 1 - alpha) ++k;
  lo = x[k - 1];
  hi = x[n - k];
  coverage = 1 - 2 * binom_half_cdf(n, k - 1);
}

PairedVerdict paired_verdict(const std::vector<double>& ratios, double threshold, double alpha) {
  PairedVerdict v;
  v.rounds = ratios.size();
  median_interval(ratios, alpha, v.median, v.lo, v.hi, v.coverage);
  const bool confident = v.coverage >= 1 - alpha;
  if (v.median >= 1 + threshold) v.verdict = confident && v.lo > 1 + threshold ? "SLOWER" : "AMBIGUOUS";
  else if (v.median <= 1 / (1 + threshold))
    v.verdict = confident && v.hi < 1 / (1 + threshold) ? "FASTER" : "AMBIGUOUS";
  else v.verdict = "SAME";
  return v;
}

}  // namespace opf::matrix
