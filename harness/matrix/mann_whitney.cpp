#include "matrix/mann_whitney.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace opf::stats {

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

namespace {
// counts[u] = number of arrangements of n1 x's and n2 y's whose U equals u
std::vector<double> u_distribution(int n1, int n2) {
  // f[i][j][u] built incrementally: f(i, j) = f(i-1, j) shifted by j + f(i, j-1)
  int maxu = n1 * n2;
  std::vector<std::vector<std::vector<double>>> f(size_t(n1 + 1), std::vector<std::vector<double>>(size_t(n2 + 1)));
  for (int i = 0; i <= n1; ++i)
    for (int j = 0; j <= n2; ++j) {
      auto& cur = f[size_t(i)][size_t(j)];
      cur.assign(size_t(i) * size_t(j) + 1, 0.0);
      if (i == 0 || j == 0) {
        cur[0] = 1;
        continue;
      }
      const auto& a = f[size_t(i - 1)][size_t(j)];  // largest value is an x: it beats all j y's
      const auto& b = f[size_t(i)][size_t(j - 1)];  // largest value is a y
      for (size_t u = 0; u < a.size(); ++u) cur[u + size_t(j)] += a[u];
      for (size_t u = 0; u < b.size(); ++u) cur[u] += b[u];
    }
  (void)maxu;
  return f[size_t(n1)][size_t(n2)];
}
}  // namespace

MannWhitney mann_whitney(const std::vector<double>& x, const std::vector<double>& y) {
  MannWhitney r;
  const size_t n1 = x.size(), n2 = y.size();
  if (n1 == 0 || n2 == 0) return r;
  std::vector<std::pair<double, int>> all;
  for (double v : x) all.push_back({v, 0});
  for (double v : y) all.push_back({v, 1});
  std::sort(all.begin(), all.end(), [](auto& a, auto& b) { return a.first < b.first; });
  const size_t n = all.size();
  std::vector<double> rank(n);
  double tie_term = 0;  // sum of t^3 - t over tie groups
  bool ties = false;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j + 1 < n && all[j + 1].first == all[i].first) ++j;
    double avg = 0.5 * double(i + j) + 1.0;
    for (size_t k = i; k <= j; ++k) rank[k] = avg;
    double t = double(j - i + 1);
    if (t > 1) ties = true;
    tie_term += t * t * t - t;
    i = j + 1;
  }
  double r1 = 0;
  for (size_t k = 0; k < n; ++k)
    if (all[k].second == 0) r1 += rank[k];
  r.u = r1 - double(n1) * double(n1 + 1) / 2.0;
  const double mean = double(n1) * double(n2) / 2.0;

  if (!ties && n1 <= 40 && n2 <= 40) {
    auto dist = u_distribution(int(n1), int(n2));
    double total = std::accumulate(dist.begin(), dist.end(), 0.0);
    double lo = std::min(r.u, double(n1 * n2) - r.u);
    double tail = 0;
    for (size_t u = 0; u <= size_t(std::lround(lo)) && u < dist.size(); ++u) tail += dist[u];
    r.p = std::min(1.0, 2.0 * tail / total);
    r.exact = true;
    return r;
  }
  double var = double(n1) * double(n2) / 12.0 * ((double(n) + 1.0) - tie_term / (double(n) * (double(n) - 1.0)));
  if (var <= 0) {
    r.p = 1;
    return r;
  }
  double z = (std::fabs(r.u - mean) - 0.5) / std::sqrt(var);
  if (z < 0) z = 0;
  r.p = std::min(1.0, std::erfc(z / std::sqrt(2.0)));
  return r;
}

}  // namespace opf::stats
