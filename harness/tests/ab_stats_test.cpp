// `opforge ab`'s pieces without builds: the median interval against a brute-force binomial, the
// verdict rules, the --ab-serve line protocol on a fake target, and the driver's pipe client on a
// shell stand-in.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "matrix/paired_verdict.h"
#include "matrix/serve_client.h"
#include "opforge/error.h"
#include "suites/ab_serve.h"

namespace opf::matrix {
namespace {

double choose(int n, int k) {
  double c = 1;
  for (int i = 1; i <= k; ++i) c = c * (n - k + i) / i;
  return c;
}

TEST(MedianInterval, CoverageIsTheBinomialOneAndAtLeastAsked) {
  for (int n = 1; n <= 40; ++n) {
    std::vector<double> x;
    for (int i = 0; i < n; ++i) x.push_back(double((i * 7919) % n));  // a permutation of 0..n-1
    double med, lo, hi, cov;
    median_interval(x, 0.05, med, lo, hi, cov);
    const int k = int(lo) + 1;  // x holds 0..n-1: the value is the 0-based order statistic
    EXPECT_EQ(int(hi), n - k) << n;
    double tail = 0;  // P(Bin(n, 1/2) < k), brute force
    for (int i = 0; i < k; ++i) tail += choose(n, i) / std::pow(2.0, n);
    EXPECT_NEAR(cov, 1 - 2 * tail, 1e-12) << n;
    if (n >= 6) {
      EXPECT_GE(cov, 0.95) << n;
      double next = tail + choose(n, k) / std::pow(2.0, n);  // one step narrower would miss 95 %
      if (k + 1 <= n / 2) {
        EXPECT_LT(1 - 2 * next, 0.95) << n;
      }
    } else {
      EXPECT_EQ(k, 1) << n;  // too few rounds: the whole range, coverage below 95 %
      EXPECT_LT(cov, 0.95) << n;
    }
    EXPECT_DOUBLE_EQ(med, (n - 1) / 2.0) << n;
  }
}

TEST(PairedVerdict, Rules) {
  const std::vector<double> slower{1.09, 1.11, 1.10, 1.12, 1.08, 1.10, 1.09, 1.11, 1.10, 1.13};
  EXPECT_EQ(paired_verdict(slower, 0.05, 0.05).verdict, "SLOWER");
  std::vector<double> faster;
  for (double r : slower) faster.push_back(1 / r);
  EXPECT_EQ(paired_verdict(faster, 0.05, 0.05).verdict, "FASTER");
  const std::vector<double> same{0.99, 1.01, 1.00, 1.02, 0.98, 1.00, 1.01, 0.99, 1.03, 0.97};
  EXPECT_EQ(paired_verdict(same, 0.05, 0.05).verdict, "SAME");
  // median beyond the threshold but two rounds below 1: the interval reaches 1
  const std::vector<double> noisy{1.2, 0.8, 1.1, 1.09, 0.9, 1.15, 1.3, 1.08, 1.07, 1.1};
  EXPECT_EQ(paired_verdict(noisy, 0.05, 0.05).verdict, "AMBIGUOUS");
  // slower for sure, but not surely by more than the threshold: AMBIGUOUS, not SLOWER
  const std::vector<double> biased{1.075, 1.007, 1.102, 1.08, 1.06, 1.09, 1.07, 1.04, 1.085, 1.11};
  const PairedVerdict b = paired_verdict(biased, 0.05, 0.05);
  EXPECT_GT(b.lo, 1.0);
  EXPECT_EQ(b.verdict, "AMBIGUOUS");
  // 5 rounds cannot reach 95 %: even a clear slowdown stays AMBIGUOUS
  EXPECT_EQ(paired_verdict({1.5, 1.5, 1.6, 1.4, 1.5}, 0.05, 0.05).verdict, "AMBIGUOUS");
  EXPECT_EQ(paired_verdict({1.5, 1.5, 1.6, 1.4, 1.5, 1.5}, 0.05, 0.05).verdict, "SLOWER");
}

std::string serve_text(const std::string& input) {
  std::FILE* in = fmemopen(const_cast<char*>(input.data()), input.size(), "r");
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* out = open_memstream(&buf, &len);
  suites::ServeTarget t;
  t.list = [] { return std::vector<std::string>{"a/x", "b/y"}; };
  t.prepare = [](const std::string& n) { return n == "a/x" ? std::string() : "no case '" + n + "'\nsecond line"; };
  t.restage = [](const std::string& n) { return n == "a/x" ? std::string() : "not prepared: " + n; };
  t.time = [](const std::string& n, double s, int64_t& calls) -> double {
    if (n != "a/x") throw Error("not staged: " + n);
    calls = int64_t(s * 1000);
    return 1234.5;
  };
  EXPECT_EQ(suites::serve_ab(in, out, t), 0);
  std::fclose(in);
  std::fclose(out);
  std::string s(buf, len);
  free(buf);
  return s;
}

TEST(AbServe, Protocol) {
  EXPECT_EQ(serve_text("list\nprepare a/x\nprepare b/y\nrestage a/x\nrestage b/y\ntime a/x 0.25\ntime b/y 0.1\ntime "
                       "a/x 0\ntime a/x\nfrob\nquit\nlist\n"),
            "a/x\nb/y\n.\nok\nerror no case 'b/y' second line\nok\nerror not prepared: b/y\nns 1234.5 250\nerror not "
            "staged: b/y\n"
            "error time: seconds must be in (0, 60), got '0'\nerror unknown request 'time a/x'\nerror unknown request "
            "'frob'\n");
  EXPECT_EQ(suites::median_ns({3e-9, 1e-9, 2e-9}), 2);
  EXPECT_EQ(suites::median_ns({4e-9, 1e-9, 2e-9, 3e-9}), 2.5);
}

TEST(ServeClient, TalksToAChildAndNamesItsLogWhenItDies) {
  char dir[] = "/tmp/opf-serve-client-XXXXXX";
  ASSERT_TRUE(mkdtemp(dir));
  const std::string log = std::string(dir) + "/child.log";
  {
    ServeClient c("fake",
                  {"/bin/sh", "-c",
                   "while read l; do case \"$l\" in list) echo one; echo two; echo .;; quit) exit 0;; *) echo \"got "
                   "$l\";; esac; done"},
                  {}, log);
    EXPECT_EQ(c.list(10), (std::vector<std::string>{"one", "two"}));
    EXPECT_EQ(c.request("prepare x", 10), "got prepare x");
  }
  {
    ServeClient c("fake", {"/bin/sh", "-c", "read l; echo 'dying' >&2; exit 3"}, {}, log);
    try {
      c.request("prepare x", 10);
      FAIL() << "no error from a dead server";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(log), std::string::npos) << e.what();
    }
  }
  {
    ServeClient c("fake", {"/bin/sh", "-c", "read l; read l2"}, {}, log);
    try {
      c.request("prepare x", 0.3);
      FAIL() << "no timeout";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("no reply"), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace opf::matrix
