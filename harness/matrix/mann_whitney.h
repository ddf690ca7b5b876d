// Mann-Whitney U test (two-sided), the gate's test for "did this benchmark's timing distribution
// move": rank-based, so one slow outlier repetition cannot fake a regression the way a mean can.
// Exact p-value from the null distribution of U when there are no ties and the samples are
// small; otherwise the normal approximation with tie and continuity corrections.
#pragma once

#include <vector>

namespace opf::stats {

struct MannWhitney {
  double u = 0;  // U of the first sample (x)
  double p = 1;  // two-sided p-value
  bool exact = false;
};

MannWhitney mann_whitney(const std::vector<double>& x, const std::vector<double>& y);
double median(std::vector<double> v);

}  // namespace opf::stats
