// Exclusive-time rules (docs/chakra.md §4.2): the linear algorithm against a literal O(n^2)
// transcription of the reference's rule, plus hand cases for the tie quirk, touching and
// partially overlapping intervals, Python int/float result kinds and the negative case.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "exclusive_time.h"

namespace opf::chakra {
namespace {

PyNum I(int64_t v) { return PyNum::of_int(v); }
PyNum D(double v) { return PyNum::of_double(v); }

bool same(const PyNum& a, const PyNum& b) { return a.is_int == b.is_int && (a.is_int ? a.i == b.i : a.d == b.d); }
std::string show(const PyNum& n) {
  std::string s;
  py_json_num(n, s);
  return s + (n.is_int ? " (int)" : " (float)");
}

// The reference, transcribed: sort by (ts, dur) [or (ts, -dur)], for each op collect the later
// ops contained in it until one starts after its end, sort by start, merge (<=), subtract.
std::vector<PyNum> literal(const std::vector<TimedOp>& ops, TieOrder order) {
  std::vector<size_t> idx(ops.size());
  std::iota(idx.begin(), idx.end(), size_t(0));
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    int c = py_cmp(ops[a].ts, ops[b].ts);
    if (c) return c < 0;
    c = py_cmp(ops[a].dur, ops[b].dur);
    return order == TieOrder::reference ? c < 0 : c > 0;
  });
  std::vector<PyNum> out(ops.size());
  for (size_t i = 0; i < idx.size(); ++i) {
    const auto& op = ops[idx[i]];
    PyNum end = py_add(op.ts, op.dur), excl = op.dur;
    std::vector<std::pair<PyNum, PyNum>> regions;
    for (size_t j = i + 1; j < idx.size(); ++j) {
      const auto& ch = ops[idx[j]];
      PyNum ce = py_add(ch.ts, ch.dur);
      if (ch.ts >= op.ts && ce <= end) regions.emplace_back(ch.ts, ce);
      if (end < ch.ts) break;
    }
    std::stable_sort(regions.begin(), regions.end(), [](auto& a, auto& b) { return a.first < b.first; });
    std::vector<std::pair<PyNum, PyNum>> merged;
    if (!regions.empty()) merged.push_back(regions[0]);
    for (auto& cur : regions) {
      auto& prev = merged.back();
      if (cur.first <= prev.second) prev.second = cur.second > prev.second ? cur.second : prev.second;
      else merged.push_back(cur);
    }
    for (auto& [s, e] : merged) excl = py_sub(excl, py_sub(e, s));
    out[idx[i]] = excl;
  }
  return out;
}

std::vector<PyNum> run(const std::vector<TimedOp>& ops, TieOrder order) {
  int64_t neg = -1;
  return compute_exclusive(ops, order, neg);
}

TEST(ExclusiveTime, NestedChildrenAreSubtracted) {
  std::vector<TimedOp> ops = {{I(0), I(100), 0}, {I(10), I(10), 1}, {I(30), I(20), 2}, {I(35), I(5), 3}};
  auto r = run(ops, TieOrder::reference);
  EXPECT_TRUE(same(r[0], I(70))) << show(r[0]);
  EXPECT_TRUE(same(r[1], I(10)));
  EXPECT_TRUE(same(r[2], I(15)));
  EXPECT_TRUE(same(r[3], I(5)));
}

TEST(ExclusiveTime, EqualTsTieQuirkOnlyInReferenceOrder) {
  // parent [0,10] and child [0,4] start together; grandchild [1,3]
  std::vector<TimedOp> ops = {{I(0), I(10), 0}, {I(0), I(4), 1}, {I(1), I(2), 2}};
  auto ref = run(ops, TieOrder::reference);
  EXPECT_TRUE(same(ref[0], I(8))) << "reference: child sorts first, only the grandchild is subtracted: "
                                  << show(ref[0]);
  EXPECT_TRUE(same(ref[1], I(2)));
  auto fixed = run(ops, TieOrder::parent_first);
  EXPECT_TRUE(same(fixed[0], I(6))) << show(fixed[0]);
  EXPECT_TRUE(same(fixed[1], I(2)));
}

TEST(ExclusiveTime, TouchingAndPartialOverlap) {
  // touching siblings merge into one region; B only partially overlaps A but C is inside both
  std::vector<TimedOp> ops = {{I(0), I(100), 0},  {I(10), I(10), 1},  {I(20), I(10), 2},
                              {I(200), I(10), 3}, {I(205), I(15), 4}, {I(206), I(2), 5}};
  auto r = run(ops, TieOrder::reference);
  EXPECT_TRUE(same(r[0], I(80))) << show(r[0]);
  EXPECT_TRUE(same(r[3], I(8))) << show(r[3]);
  EXPECT_TRUE(same(r[4], I(13))) << show(r[4]);
}

TEST(ExclusiveTime, PythonResultKinds) {
  // int ts + int dur stay int; a float ts makes the subtracted length a float
  auto a = run({{I(0), I(10), 0}, {I(2), I(3), 1}}, TieOrder::reference);
  EXPECT_TRUE(same(a[0], I(7)));
  auto b = run({{D(0.5), I(10), 0}, {D(2.5), I(3), 1}}, TieOrder::reference);
  EXPECT_TRUE(same(b[0], D(7.0))) << show(b[0]);
  EXPECT_TRUE(same(b[1], I(3))) << "no child: dur keeps its kind";
  // a zero-length child still turns the result into a float
  auto c = run({{D(1.0), I(5), 0}, {D(2.0), I(0), 1}}, TieOrder::reference);
  EXPECT_TRUE(same(c[0], D(5.0))) << show(c[0]);
}

TEST(ExclusiveTime, NegativeFromRoundingIsReportedOrClamped) {
  // children tiling the parent with one-ulp gaps (found by a search): the rounded lengths add
  // up to more than the parent's duration
  std::vector<TimedOp> ops = {{D(0.01), D(1.3), 0},
                              {D(0.010000000000000004), D(0.006125709498320817), 1},
                              {D(0.016125709498320824), D(0.005623646278857815), 2},
                              {D(0.021749355777178642), D(0.04571192774558794), 3},
                              {D(0.06746128352276659), D(1.2425387164772335), 4}};
  auto lit = literal(ops, TieOrder::reference);
  ASSERT_TRUE(lit[0].negative()) << "test premise: float rounding makes the reference negative";
  int64_t neg = -1;
  compute_exclusive(ops, TieOrder::reference, neg);
  EXPECT_GE(neg, 0);
  auto fixed = compute_exclusive(ops, TieOrder::parent_first, neg);
  EXPECT_EQ(neg, -1);
  EXPECT_TRUE(same(fixed[0], D(0.0))) << show(fixed[0]);
}

TEST(ExclusiveTime, MatchesLiteralReferenceOnRandomTraces) {
  const uint64_t seed = 20261129;
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 400; ++trial) {
    const bool floats = trial % 2, nested = trial % 3 != 0;
    std::vector<TimedOp> ops;
    const int n = 1 + int(rng() % 120);
    if (nested) {  // a real-looking call tree with many equal starts and touching siblings
      std::vector<std::pair<int64_t, int64_t>> stack = {{0, 1000}};
      int64_t t = 0;
      for (int i = 0; i < n; ++i) {
        while (stack.size() > 1 && (rng() % 3 == 0 || t >= stack.back().second)) stack.pop_back();
        int64_t lim = stack.back().second;
        if (t > lim) t = lim;
        int64_t dur = int64_t(rng() % uint64_t(std::max<int64_t>(1, lim - t + 1)));
        ops.push_back({I(t), I(dur), uint32_t(i)});
        stack.push_back({t, t + dur});
        if (rng() % 2) t += int64_t(rng() % 3);
      }
    } else {  // arbitrary overlapping intervals
      for (int i = 0; i < n; ++i) ops.push_back({I(int64_t(rng() % 60)), I(int64_t(rng() % 30)), uint32_t(i)});
    }
    if (floats)
      for (auto& o : ops) {
        o.ts = D(double(o.ts.i) * 0.1 + 1.7e12);
        o.dur = D(double(o.dur.i) * 0.1);
      }
    for (TieOrder order : {TieOrder::reference, TieOrder::parent_first}) {
      auto want = literal(ops, order);
      int64_t neg = -1;
      auto got = compute_exclusive(ops, order, neg);
      for (size_t i = 0; i < ops.size(); ++i) {
        if (order == TieOrder::parent_first && want[i].negative()) continue;  // clamped by design
        ASSERT_TRUE(same(got[i], want[i])) << "seed " << seed << " trial " << trial << " op " << i << ": got "
                                           << show(got[i]) << ", reference " << show(want[i]);
      }
    }
  }
}

}  // namespace
}  // namespace opf::chakra
