// syncbn — what the registry sweep cannot state as "match the reference": K = 1 ... 8 shards of
// unequal sizes, each reduced by welford and merged by welford_parallel, give the global one-pass
// statistics (and the same running stats); the sharded backward (reduce per shard, summed sums,
// elementwise per shard) gives the single-process dx; channels-last and NCHW agree; a mean far from
// the spread keeps an accurate variance; reductions have the same bits for any thread count; NaN
// stays in its channel; empty and one-element inputs; the channels-last residual + ReLU forward
// and the ReLU backward's recomputed mask (exactly the forward's zeros; the boundary at 0, -0,
// the smallest positive value, NaN); argument errors through the C++ API and `opforge op`. Seeded inputs (seed
// printed); outputs poisoned before every run. Runs the module the loader gives this build (prebuilt, or JIT-compiled
// in mode=jit), through the ABI.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "opforge/abi.h"
#include "opforge/call.h"
#include "opforge/dtype.h"
#include "opforge/error.h"
#include "opforge/loader.h"
#include "tests/op_cli_check.h"

namespace {

using namespace opf::op_cli_check;

namespace fs = std::filesystem;
using opf::DType;
using opf::Shape;

constexpr uint64_t kSeed = 20241210;
constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();

const opf::OpInfo& op() { return *opf::find_op("syncbn"); }
const opf_module_info* module() { return opf::Loader::instance().load(op(), "cpu").info; }

// One argument of a call: f32 values stored as `dtype`; out arguments come back as f32.
struct Arg {
  std::string name;
  std::vector<float>* v;
  DType dtype;
  Shape shape;
};

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Runs `entry` on args (inputs stored from *v, outputs poisoned, then read back into *v, resized to
// their shape). Returns "" or the error's text.
std::string run(const std::string& entry, const std::vector<Arg>& args, int threads = 0,
                const std::vector<std::pair<std::string, double>>& params = {}) {
  std::vector<std::vector<std::byte>> bufs;
  bufs.reserve(args.size());
  const opf::EntryInfo* e = op().find_entry(entry);
  auto role_of = [&](const std::string& name) {
    const opf::ArgInfo* a = e ? e->find(name) : nullptr;
    return a ? a->role : opf::Role::in;
  };
  for (const Arg& a : args) {
    const size_t n = size_t(numel(a.shape));
    bufs.emplace_back((std::max(n, a.v->size()) + 8) * opf::dtype_size(a.dtype));
    const bool out = role_of(a.name) == opf::Role::out;
    for (size_t i = 0; i < n; ++i)
      opf::store_element(a.dtype, bufs.back().data(), int64_t(i), out || i >= a.v->size() ? kPoison : (*a.v)[i]);
  }
  std::string err;
  try {
    opf::CallBuilder call(op(), entry);
    call.threads(threads);
    for (auto& [k, v] : params) call.param(k, v);
    for (size_t i = 0; i < args.size(); ++i) call.add(args[i].name, bufs[i].data(), args[i].dtype, args[i].shape);
    call.run(module());
  } catch (const opf::Error& ex) {
    err = ex.what();
  }
  for (size_t i = 0; i < args.size(); ++i) {
    if (role_of(args[i].name) == opf::Role::in) continue;
    const size_t n = size_t(numel(args[i].shape));
    args[i].v->resize(n);
    for (size_t j = 0; j < n; ++j)
      (*args[i].v)[j] = float(opf::load_element(args[i].dtype, bufs[i].data(), int64_t(j)));
  }
  return err;
}

std::vector<float> draw(size_t n, float lo, float hi, uint64_t salt) {
  std::mt19937_64 rng(kSeed + salt);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// float64 statistics of channel c of x [n, ch, hw] (NCHW).
void stats64(const std::vector<float>& x, int64_t n, int64_t ch, int64_t hw, int64_t c, double& mean, double& var) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < hw; ++j) s += x[size_t((i * ch + c) * hw + j)];
  mean = s / double(n * hw);
  double m2 = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < hw; ++j) m2 += std::pow(x[size_t((i * ch + c) * hw + j)] - mean, 2);
  var = m2 / double(n * hw);
}

// NCHW [n, ch, hw] -> channels last [n*hw, ch]
std::vector<float> to_last(const std::vector<float>& x, int64_t n, int64_t ch, int64_t hw) {
  std::vector<float> y(x.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < ch; ++c)
      for (int64_t j = 0; j < hw; ++j) y[size_t((i * hw + j) * ch + c)] = x[size_t((i * ch + c) * hw + j)];
  return y;
}

void expect_one_line(const std::string& err) { EXPECT_EQ(err.find('\n'), std::string::npos) << err; }

// K shards of unequal sizes (shard k holds n_k images, alternately NCHW and channels last), merged
// by welford_parallel: mean, invstd and the running stats of the global data, in float64.
TEST(SyncbnMerge, KShardsMergeToTheGlobalStatistics) {
  std::printf("seed %llu\n", (unsigned long long)kSeed);
  const int64_t C = 5, HW = 37;
  const double eps = 1e-4, mom = 0.3;
  for (int K = 1; K <= 8; ++K) {
    SCOPED_TRACE("K = " + std::to_string(K));
    std::vector<int64_t> nk;
    int64_t total = 0;
    for (int k = 0; k < K; ++k) total += nk.emplace_back(1 + (k * 7 + K) % 5);  // 1 .. 5 images
    std::vector<float> global = draw(size_t(total * C * HW), -2.0f, 6.0f, uint64_t(K));
    std::vector<float> mean_all, var_all, count_all;
    int64_t at = 0;
    for (int k = 0; k < K; ++k) {
      std::vector<float> x(global.begin() + at * C * HW, global.begin() + (at + nk[k]) * C * HW), m, v;
      at += nk[k];
      const bool last = k % 2 == 1;
      if (last) x = to_last(x, nk[k], C, HW);
      const Shape xs = last ? Shape{nk[k] * HW, C} : Shape{nk[k], C, HW};
      ASSERT_EQ(run(last ? "welford_c_last" : "welford",
                    {{"x", &x, DType::f32, xs}, {"mean", &m, DType::f32, {C}}, {"var_biased", &v, DType::f32, {C}}}),
                "");
      mean_all.insert(mean_all.end(), m.begin(), m.end());
      var_all.insert(var_all.end(), v.begin(), v.end());
      count_all.push_back(float(nk[k] * HW));
    }
    std::vector<float> rm = draw(size_t(C), -1, 1, 100), rv = draw(size_t(C), 0.5f, 2, 101), mean, invstd;
    const std::vector<float> rm0 = rm, rv0 = rv;
    ASSERT_EQ(run("welford_parallel",
                  {{"mean_all", &mean_all, DType::f32, {K, C}},
                   {"var_all", &var_all, DType::f32, {K, C}},
                   {"count_all", &count_all, DType::f32, {K}},
                   {"running_mean", &rm, DType::f32, {C}},
                   {"running_var", &rv, DType::f32, {C}},
                   {"mean", &mean, DType::f32, {C}},
                   {"invstd", &invstd, DType::f32, {C}}},
                  0, {{"eps", eps}, {"momentum", mom}}),
              "");
    for (int64_t c = 0; c < C; ++c) {
      double m, v;
      stats64(global, total, C, HW, c, m, v);
      const double n = double(total * HW);
      EXPECT_NEAR(mean[size_t(c)], m, 2e-6 * (std::fabs(m) + std::sqrt(v))) << c;
      EXPECT_NEAR(invstd[size_t(c)], 1 / std::sqrt(v + eps), 4e-6 / std::sqrt(v + eps)) << c;
      EXPECT_NEAR(rm[size_t(c)], (1 - mom) * rm0[size_t(c)] + mom * m, 4e-6 * (std::fabs(m) + 1)) << c;
      const double want_rv = (1 - mom) * rv0[size_t(c)] + mom * v * n / (n - 1);
      EXPECT_NEAR(rv[size_t(c)], want_rv, 4e-6 * want_rv) << c;
    }
  }
}

// Backward over K = 3 shards (reduce each, sum the sums as an all-reduce would, elementwise each
// with every shard's count) gives the single-process dx of the whole batch.
TEST(SyncbnMerge, ShardedBackwardEqualsTheWholeBatch) {
  const int64_t C = 4, HW = 29, K = 3;
  const int64_t nk[K] = {2, 5, 1}, total = 8;
  std::vector<float> x = draw(size_t(total * C * HW), -1, 3, 7), dy = draw(size_t(total * C * HW), -1, 1, 8);
  std::vector<float> mean(static_cast<size_t>(C)), invstd(static_cast<size_t>(C)), w = draw(size_t(C), 0.5f, 1.5f, 9);
  for (int64_t c = 0; c < C; ++c) {
    double m, v;
    stats64(x, total, C, HW, c, m, v);
    mean[size_t(c)] = float(m);
    invstd[size_t(c)] = float(1 / std::sqrt(v + 1e-5));
  }
  const Shape all{total, C, HW};
  std::vector<float> s1, sx1, gw, gb, dx1, count1 = {float(total * HW)};
  ASSERT_EQ(run("backward_reduce", {{"dy", &dy, DType::f32, all},
                                    {"x", &x, DType::f32, all},
                                    {"mean", &mean, DType::f32, {C}},
                                    {"invstd", &invstd, DType::f32, {C}},
                                    {"sum_dy", &s1, DType::f32, {C}},
                                    {"sum_dy_xmu", &sx1, DType::f32, {C}},
                                    {"grad_weight", &gw, DType::f32, {C}},
                                    {"grad_bias", &gb, DType::f32, {C}}}),
            "");
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_EQ(gb[size_t(c)], s1[size_t(c)]);
    EXPECT_NEAR(gw[size_t(c)], double(sx1[size_t(c)]) * invstd[size_t(c)], 1e-6 * std::fabs(gw[size_t(c)]));
  }
  ASSERT_EQ(run("backward_elemt", {{"dy", &dy, DType::f32, all},
                                   {"x", &x, DType::f32, all},
                                   {"mean", &mean, DType::f32, {C}},
                                   {"invstd", &invstd, DType::f32, {C}},
                                   {"weight", &w, DType::f32, {C}},
                                   {"sum_dy", &s1, DType::f32, {C}},
                                   {"sum_dy_xmu", &sx1, DType::f32, {C}},
                                   {"count_all", &count1, DType::f32, {1}},
                                   {"dx", &dx1, DType::f32, all}}),
            "");
  std::vector<double> s(size_t(C), 0.0), sx(size_t(C), 0.0);
  std::vector<float> count;
  int64_t at = 0;
  std::vector<std::vector<float>> xs, gs;
  for (int64_t k = 0; k < K; ++k) {
    const size_t a = size_t(at * C * HW), b = size_t((at + nk[k]) * C * HW);
    xs.emplace_back(x.begin() + long(a), x.begin() + long(b));
    gs.emplace_back(dy.begin() + long(a), dy.begin() + long(b));
    at += nk[k];
    std::vector<float> ps, psx, pw, pb;
    const Shape sh{nk[k], C, HW};
    ASSERT_EQ(run("backward_reduce", {{"dy", &gs[size_t(k)], DType::f32, sh},
                                      {"x", &xs[size_t(k)], DType::f32, sh},
                                      {"mean", &mean, DType::f32, {C}},
                                      {"invstd", &invstd, DType::f32, {C}},
                                      {"sum_dy", &ps, DType::f32, {C}},
                                      {"sum_dy_xmu", &psx, DType::f32, {C}},
                                      {"grad_weight", &pw, DType::f32, {C}},
                                      {"grad_bias", &pb, DType::f32, {C}}}),
              "");
    for (int64_t c = 0; c < C; ++c) s[size_t(c)] += ps[size_t(c)], sx[size_t(c)] += psx[size_t(c)];
    count.push_back(float(nk[k] * HW));
  }
  std::vector<float> sf(s.begin(), s.end()), sxf(sx.begin(), sx.end());
  at = 0;
  for (int64_t k = 0; k < K; ++k) {
    std::vector<float> dx;
    const Shape sh{nk[k], C, HW};
    ASSERT_EQ(run("backward_elemt", {{"dy", &gs[size_t(k)], DType::f32, sh},
                                     {"x", &xs[size_t(k)], DType::f32, sh},
                                     {"mean", &mean, DType::f32, {C}},
                                     {"invstd", &invstd, DType::f32, {C}},
                                     {"weight", &w, DType::f32, {C}},
                                     {"sum_dy", &sf, DType::f32, {C}},
                                     {"sum_dy_xmu", &sxf, DType::f32, {C}},
                                     {"count_all", &count, DType::f32, {K}},
                                     {"dx", &dx, DType::f32, sh}}),
              "");
    for (size_t i = 0; i < dx.size(); ++i) {
      const float want = dx1[size_t(at * C * HW) + i];
      ASSERT_NEAR(dx[i], want, 1e-5 * (1 + std::fabs(want))) << "shard " << k << " element " << i;
    }
    at += nk[k];
  }
}

// Channels last and NCHW: statistics agree to rounding; forward and backward_elemt, elementwise
// with the same per-channel constants, give the same bits (transposed).
TEST(SyncbnLayout, ChannelsLastAgreesWithNchw) {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string(opf::dtype_name(t)));
    const int64_t N = 3, C = 19, HW = 41, M = N * HW;
    std::vector<float> x = draw(size_t(N * C * HW), -1, 3, 11), g = draw(size_t(N * C * HW), -1, 1, 12);
    std::vector<float> xl = to_last(x, N, C, HW), gl = to_last(g, N, C, HW);
    std::vector<float> m1, v1, m2, v2;
    ASSERT_EQ(run("welford",
                  {{"x", &x, t, {N, C, HW}}, {"mean", &m1, DType::f32, {C}}, {"var_biased", &v1, DType::f32, {C}}}),
              "");
    ASSERT_EQ(run("welford_c_last",
                  {{"x", &xl, t, {M, C}}, {"mean", &m2, DType::f32, {C}}, {"var_biased", &v2, DType::f32, {C}}}),
              "");
    for (int64_t c = 0; c < C; ++c) {
      EXPECT_NEAR(m1[size_t(c)], m2[size_t(c)], 1e-6 * (1 + std::fabs(m1[size_t(c)]))) << c;
      EXPECT_NEAR(v1[size_t(c)], v2[size_t(c)], 1e-5 * v1[size_t(c)]) << c;
    }
    std::vector<float> invstd(static_cast<size_t>(C)), w = draw(size_t(C), 0.5f, 1.5f, 13),
                                                       b = draw(size_t(C), -1, 1, 14);
    for (int64_t c = 0; c < C; ++c) invstd[size_t(c)] = 1.0f / std::sqrt(v1[size_t(c)] + 1e-5f);
    std::vector<float> y1, y2;
    ASSERT_EQ(run("forward", {{"x", &x, t, {N, C, HW}},
                              {"mean", &m1, DType::f32, {C}},
                              {"invstd", &invstd, DType::f32, {C}},
                              {"weight", &w, DType::f32, {C}},
                              {"bias", &b, DType::f32, {C}},
                              {"y", &y1, t, {N, C, HW}}}),
              "");
    ASSERT_EQ(run("forward_c_last", {{"x", &xl, t, {M, C}},
                                     {"mean", &m1, DType::f32, {C}},
                                     {"invstd", &invstd, DType::f32, {C}},
                                     {"weight", &w, DType::f32, {C}},
                                     {"bias", &b, DType::f32, {C}},
                                     {"y", &y2, t, {M, C}}}),
              "");
    EXPECT_EQ(to_last(y1, N, C, HW), y2);
    std::vector<float> sd = draw(size_t(C), -5, 5, 15), sdx = draw(size_t(C), -5, 5, 16), cnt = {float(M)}, d1, d2;
    ASSERT_EQ(run("backward_elemt", {{"dy", &g, t, {N, C, HW}},
                                     {"x", &x, t, {N, C, HW}},
                                     {"mean", &m1, DType::f32, {C}},
                                     {"invstd", &invstd, DType::f32, {C}},
                                     {"weight", &w, DType::f32, {C}},
                                     {"sum_dy", &sd, DType::f32, {C}},
                                     {"sum_dy_xmu", &sdx, DType::f32, {C}},
                                     {"count_all", &cnt, DType::f32, {1}},
                                     {"dx", &d1, t, {N, C, HW}}}),
              "");
    ASSERT_EQ(run("backward_elemt_c_last", {{"dy", &gl, t, {M, C}},
                                            {"x", &xl, t, {M, C}},
                                            {"mean", &m1, DType::f32, {C}},
                                            {"invstd", &invstd, DType::f32, {C}},
                                            {"weight", &w, DType::f32, {C}},
                                            {"sum_dy", &sd, DType::f32, {C}},
                                            {"sum_dy_xmu", &sdx, DType::f32, {C}},
                                            {"count_all", &cnt, DType::f32, {1}},
                                            {"dx", &d2, t, {M, C}}}),
              "");
    EXPECT_EQ(to_last(d1, N, C, HW), d2);
  }
}

// A mean 10^4 times the spread: the variance keeps its relative accuracy (a one-pass
// sum x^2 - n mean^2 in f32 would lose every digit).
TEST(SyncbnWelford, LargeMeanKeepsTheVariance) {
  const int64_t N = 4, C = 3, HW = 5003;
  std::vector<float> x = draw(size_t(N * C * HW), -1, 1, 21);
  for (float& v : x) v += 10000.0f;
  for (bool last : {false, true}) {
    std::vector<float> in = last ? to_last(x, N, C, HW) : x, m, v;
    const Shape xs = last ? Shape{N * HW, C} : Shape{N, C, HW};
    ASSERT_EQ(run(last ? "welford_c_last" : "welford",
                  {{"x", &in, DType::f32, xs}, {"mean", &m, DType::f32, {C}}, {"var_biased", &v, DType::f32, {C}}}),
              "");
    for (int64_t c = 0; c < C; ++c) {
      double mean, var;
      stats64(x, N, C, HW, c, mean, var);
      EXPECT_NEAR(m[size_t(c)], mean, 1e-7 * mean) << c;
      EXPECT_NEAR(v[size_t(c)], var, 1e-5 * var) << c << (last ? " channels last" : " nchw");
    }
  }
}

// Reductions over many slots and pieces: the same bits at 1, 2, 3 and 7 threads.
TEST(SyncbnWelford, ReductionBitsDoNotDependOnThreads) {
  struct Shape3 {
    int64_t n, c, hw;
    bool last;
  };
  for (const Shape3 s : {Shape3{19, 3, 9001, false}, Shape3{70, 33, 101, true}, Shape3{1, 2, 30011, false}}) {
    SCOPED_TRACE(std::to_string(s.n) + "x" + std::to_string(s.c) + "x" + std::to_string(s.hw));
    std::vector<float> x = draw(size_t(s.n * s.c * s.hw), -1, 3, 31), g = draw(x.size(), -1, 1, 32);
    const Shape xs = s.last ? Shape{s.n * s.hw, s.c} : Shape{s.n, s.c, s.hw};
    std::vector<float> mean = draw(size_t(s.c), 0.5f, 1.5f, 33), invstd = draw(size_t(s.c), 0.5f, 1.5f, 34);
    std::vector<std::vector<float>> first;
    for (int threads : {1, 2, 3, 7}) {
      std::vector<float> m, v, sd, sdx, gw, gb;
      ASSERT_EQ(run(s.last ? "welford_c_last" : "welford",
                    {{"x", &x, DType::f32, xs}, {"mean", &m, DType::f32, {s.c}}, {"var_biased", &v, DType::f32, {s.c}}},
                    threads),
                "");
      ASSERT_EQ(run(s.last ? "backward_reduce_c_last" : "backward_reduce",
                    {{"dy", &g, DType::f32, xs},
                     {"x", &x, DType::f32, xs},
                     {"mean", &mean, DType::f32, {s.c}},
                     {"invstd", &invstd, DType::f32, {s.c}},
                     {"sum_dy", &sd, DType::f32, {s.c}},
                     {"sum_dy_xmu", &sdx, DType::f32, {s.c}},
                     {"grad_weight", &gw, DType::f32, {s.c}},
                     {"grad_bias", &gb, DType::f32, {s.c}}},
                    threads),
                "");
      const std::vector<std::vector<float>> got = {m, v, sd, sdx, gw, gb};
      if (threads == 1) {
        first = got;
        continue;
      }
      for (size_t k = 0; k < got.size(); ++k)
        EXPECT_EQ(std::memcmp(first[k].data(), got[k].data(), got[k].size() * 4), 0)
            << threads << " threads, output " << k;
    }
  }
}

// A NaN reaches its own channel's statistics only; one element: mean = x, var = 0.
TEST(SyncbnWelford, NanStaysInItsChannelAndOneElement) {
  const int64_t N = 2, C = 6, HW = 17;
  std::vector<float> x = draw(size_t(N * C * HW), -1, 3, 41);
  x[size_t((1 * C + 4) * HW + 3)] = std::nanf("");
  for (bool last : {false, true}) {
    std::vector<float> in = last ? to_last(x, N, C, HW) : x, m, v;
    const Shape xs = last ? Shape{N * HW, C} : Shape{N, C, HW};
    ASSERT_EQ(run(last ? "welford_c_last" : "welford",
                  {{"x", &in, DType::f32, xs}, {"mean", &m, DType::f32, {C}}, {"var_biased", &v, DType::f32, {C}}}),
              "");
    for (int64_t c = 0; c < C; ++c) {
      EXPECT_EQ(std::isnan(m[size_t(c)]), c == 4) << c;
      EXPECT_EQ(std::isnan(v[size_t(c)]), c == 4) << c;
    }
  }
  std::vector<float> one = {2.75f}, m, v;
  ASSERT_EQ(
      run("welford",
          {{"x", &one, DType::f32, {1, 1, 1}}, {"mean", &m, DType::f32, {1}}, {"var_biased", &v, DType::f32, {1}}}),
      "");
  EXPECT_EQ(m[0], 2.75f);
  EXPECT_EQ(v[0], 0.0f);
}

TEST(SyncbnWelford, EmptyInputsGiveEmptyStatistics) {
  std::vector<float> x, g, m, v, mean = {1, 2}, invstd = {1, 1}, sd, sdx, gw, gb;
  ASSERT_EQ(run("welford",
                {{"x", &x, DType::f32, {0, 2, 5}}, {"mean", &m, DType::f32, {2}}, {"var_biased", &v, DType::f32, {2}}}),
            "");
  EXPECT_EQ(m, std::vector<float>({0, 0}));
  EXPECT_EQ(v, std::vector<float>({0, 0}));
  ASSERT_EQ(run("backward_reduce_c_last", {{"dy", &g, DType::f32, {0, 2}},
                                           {"x", &x, DType::f32, {0, 2}},
                                           {"mean", &mean, DType::f32, {2}},
                                           {"invstd", &invstd, DType::f32, {2}},
                                           {"sum_dy", &sd, DType::f32, {2}},
                                           {"sum_dy_xmu", &sdx, DType::f32, {2}},
                                           {"grad_weight", &gw, DType::f32, {2}},
                                           {"grad_bias", &gb, DType::f32, {2}}}),
            "");
  for (const auto* o : {&sd, &sdx, &gw, &gb}) EXPECT_EQ(*o, std::vector<float>({0, 0}));
}

TEST(SyncbnArgs, BadArgumentsFailWithAOneLineReasonAndWriteNothing) {
  const int64_t K = 3, C = 4;
  struct Want {
    std::vector<float> counts;
    Shape var_shape;
    DType mean_dtype;
    const char* text;
  };
  const Want cases[] = {
      {{10, 2.5f, 4},
       {K, C},
       DType::f32,
       "welford_parallel: argument 2 (count_all) element 1 is 2.5; counts are integers >= 0"},
      {{10, -1, 4}, {K, C}, DType::f32, "argument 2 (count_all) element 1 is -1"},
      {{1, 0, 0},
       {K, C},
       DType::f32,
       "argument 2 (count_all) sums to 1; the unbiased running variance needs more than 1"},
      {{10, 2, 4}, {K, C + 1}, DType::f32, "welford_parallel: argument 1 (var_all) has size 5 in dim 1, expected 4"},
      {{10, 2, 4},
       {K, C},
       DType::f16,
       "welford_parallel: argument 0 (mean_all) must be a 2-D f32 tensor [K, C], got 2-D f16"},
  };
  for (const Want& w : cases) {
    SCOPED_TRACE(w.text);
    std::vector<float> ma = draw(size_t(K * C), -1, 1, 51), va = draw(size_t(K * (C + 1)), 0.5f, 1, 52);
    std::vector<float> counts = w.counts, rm = draw(size_t(C), -1, 1, 53), rv = draw(size_t(C), 0.5f, 1, 54), mean,
                       invstd;
    const std::vector<float> rm0 = rm;
    const std::string err = run("welford_parallel", {{"mean_all", &ma, w.mean_dtype, {K, C}},
                                                     {"var_all", &va, DType::f32, w.var_shape},
                                                     {"count_all", &counts, DType::f32, {K}},
                                                     {"running_mean", &rm, DType::f32, {C}},
                                                     {"running_var", &rv, DType::f32, {C}},
                                                     {"mean", &mean, DType::f32, {C}},
                                                     {"invstd", &invstd, DType::f32, {C}}});
    EXPECT_NE(err.find(w.text), std::string::npos) << err;
    expect_one_line(err);
    EXPECT_EQ(rm, rm0) << "running_mean written despite the error";
    for (float v : mean) EXPECT_TRUE(std::isnan(v)) << "mean written despite the error";
  }
  // data entries: shapes and dtypes against x
  const int64_t N = 2, HW = 7;
  std::vector<float> x = draw(size_t(N * C * HW), -1, 1, 55), ch = draw(size_t(C + 1), 0.5f, 1, 56), y,
                     cnt = {float(N * HW)};
  std::string err = run("forward", {{"x", &x, DType::f32, {N, C, HW}},
                                    {"mean", &ch, DType::f32, {C}},
                                    {"invstd", &ch, DType::f32, {C}},
                                    {"weight", &ch, DType::f32, {C + 1}},
                                    {"bias", &ch, DType::f32, {C}},
                                    {"y", &y, DType::f32, {N, C, HW}}});
  EXPECT_NE(err.find("forward: argument 3 (weight) has size 5 in dim 0, expected 4"), std::string::npos) << err;
  for (float v : y) ASSERT_TRUE(std::isnan(v)) << "y written despite the error";
  err = run("forward_c_last", {{"x", &x, DType::f32, {N, C, HW}},
                               {"mean", &ch, DType::f32, {C}},
                               {"invstd", &ch, DType::f32, {C}},
                               {"weight", &ch, DType::f32, {C}},
                               {"bias", &ch, DType::f32, {C}},
                               {"y", &y, DType::f32, {N, C, HW}}});
  EXPECT_NE(err.find("forward_c_last: argument 0 (x) must be a 2-D f32/f16/bf16 tensor [M, C]"), std::string::npos)
      << err;
  err = run("forward", {{"x", &x, DType::f32, {N, C, HW}},
                        {"mean", &ch, DType::f32, {C}},
                        {"invstd", &ch, DType::f32, {C}},
                        {"weight", &ch, DType::bf16, {C}},
                        {"bias", &ch, DType::f32, {C}},
                        {"y", &y, DType::f32, {N, C, HW}}});
  EXPECT_NE(err.find("forward: argument 3 (weight) has dtype bf16, expected f32"), std::string::npos) << err;
  std::vector<float> dx, zero = {0};
  err = run("backward_elemt", {{"dy", &x, DType::f32, {N, C, HW}},
                               {"x", &x, DType::f32, {N, C, HW}},
                               {"mean", &ch, DType::f32, {C}},
                               {"invstd", &ch, DType::f32, {C}},
                               {"weight", &ch, DType::f32, {C}},
                               {"sum_dy", &ch, DType::f32, {C}},
                               {"sum_dy_xmu", &ch, DType::f32, {C}},
                               {"count_all", &zero, DType::f32, {1}},
                               {"dx", &dx, DType::f32, {N, C, HW}}});
  EXPECT_NE(err.find("backward_elemt: argument 7 (count_all) sums to 0"), std::string::npos) << err;
  expect_one_line(err);
  for (float v : dx) ASSERT_TRUE(std::isnan(v)) << "dx written despite the error";
  err = run("backward_reduce", {{"dy", &x, DType::f32, {N, C, HW}},
                                {"x", &x, DType::f16, {N, C, HW}},
                                {"mean", &ch, DType::f32, {C}},
                                {"invstd", &ch, DType::f32, {C}},
                                {"sum_dy", &dx, DType::f32, {C}},
                                {"sum_dy_xmu", &dx, DType::f32, {C}},
                                {"grad_weight", &dx, DType::f32, {C}},
                                {"grad_bias", &dx, DType::f32, {C}}});
  EXPECT_NE(err.find("backward_reduce: argument 1 (x) has dtype f16, expected f32"), std::string::npos) << err;
  opf_call raw{"sideways", nullptr, 0, nullptr, 0, nullptr, nullptr};
  char msg[256] = "";
  EXPECT_NE(module()->run(module(), &raw, msg, sizeof msg), 0);
  EXPECT_NE(std::string(msg).find("unknown entry 'sideways'"), std::string::npos) << msg;
}

// ---------------------------------------------------------------- residual + ReLU (channels last)
float stored_as(DType t, float v) {
  std::byte b[8];
  opf::store_element(t, b, 0, v);
  return float(opf::load_element(t, b, 0));
}

// The channels-last forward's args with an optional z; y comes back in *y.
std::string forward_last(DType t, int64_t M, int64_t C, std::vector<float>& x, std::vector<float>* z,
                         std::vector<float>& m, std::vector<float>& is, std::vector<float>& w, std::vector<float>& b,
                         std::vector<float>& y, bool relu, int threads = 0) {
  std::vector<Arg> a = {{"x", &x, t, {M, C}}};
  if (z) a.push_back({"z", z, t, {M, C}});
  a.insert(a.end(), {{"mean", &m, DType::f32, {C}},
                     {"invstd", &is, DType::f32, {C}},
                     {"weight", &w, DType::f32, {C}},
                     {"bias", &b, DType::f32, {C}},
                     {"y", &y, t, {M, C}}});
  return run(z ? "forward_z_c_last" : "forward_c_last", a, threads, {{"fuse_relu", relu ? 1.0 : 0.0}});
}

std::string relu_backward(DType t, int64_t M, int64_t C, std::vector<float>& dy, std::vector<float>& x,
                          std::vector<float>* z, std::vector<float>& m, std::vector<float>& is, std::vector<float>& w,
                          std::vector<float>& b, std::vector<float>& out, int threads = 0) {
  std::vector<Arg> a = {{"dy", &dy, t, {M, C}}, {"x", &x, t, {M, C}}};
  if (z) a.push_back({"z", z, t, {M, C}});
  a.insert(a.end(), {{"mean", &m, DType::f32, {C}},
                     {"invstd", &is, DType::f32, {C}},
                     {"weight", &w, DType::f32, {C}},
                     {"bias", &b, DType::f32, {C}},
                     {"dy_masked", &out, t, {M, C}}});
  return run(z ? "relu_backward_z_c_last" : "relu_backward_c_last", a, threads);
}

// Against float64, with and without z, ReLU on and off; C = 37 leaves a scalar tail after every
// vector body of a row. f32: the residual is one more f32 add, so y(z) is exactly y(no z) + z
// rounded once; the ReLU writes +0 exactly where that sum is <= 0. relu_backward's mask is
// exactly the forward's zeros (same f32 formula), at any thread count.
TEST(SyncbnRelu, ResidualAndReluAgainstFloat64AndTheForwardsZeros) {
  const int64_t M = 53, C = 37;
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string(opf::dtype_name(t)));
    std::vector<float> x = draw(size_t(M * C), -1, 3, 71), z = draw(size_t(M * C), -1.5f, 1.5f, 72),
                       dy = draw(size_t(M * C), 0.25f, 1, 73);
    std::vector<float> m = draw(size_t(C), 0.5f, 1.5f, 74), is = draw(size_t(C), 0.5f, 1.5f, 75),
                       w = draw(size_t(C), 0.5f, 1.5f, 76), b = draw(size_t(C), -1, 1, 77);
    // the values as stored in t (the kernel sees these)
    for (auto* v : {&x, &z, &dy})
      for (float& e : *v) e = stored_as(t, e);
    const double tol = t == DType::f32 ? 4e-6 : t == DType::f16 ? 2e-3 : 1.6e-2;
    int zeros = 0, passed = 0;
    for (bool with_z : {false, true})
      for (bool relu : {false, true}) {
        SCOPED_TRACE(std::string(with_z ? "z" : "no z") + (relu ? ", relu" : ""));
        std::vector<float> y, y1, g, g3;
        ASSERT_EQ(forward_last(t, M, C, x, with_z ? &z : nullptr, m, is, w, b, y, relu), "");
        ASSERT_EQ(forward_last(t, M, C, x, with_z ? &z : nullptr, m, is, w, b, y1, relu, 3), "");
        EXPECT_EQ(std::memcmp(y.data(), y1.data(), y.size() * 4), 0) << "1 vs 3 threads";
        ASSERT_EQ(relu_backward(t, M, C, dy, x, with_z ? &z : nullptr, m, is, w, b, g), "");
        ASSERT_EQ(relu_backward(t, M, C, dy, x, with_z ? &z : nullptr, m, is, w, b, g3, 2), "");
        EXPECT_EQ(std::memcmp(g.data(), g3.data(), g.size() * 4), 0) << "1 vs 2 threads";
        std::vector<float> plain;
        if (with_z && t == DType::f32) {
          ASSERT_EQ(forward_last(t, M, C, x, nullptr, m, is, w, b, plain, false), "");
        }
        for (int64_t r = 0; r < M; ++r)
          for (int64_t c = 0; c < C; ++c) {
            const size_t j = size_t(r * C + c);
            const double pre =
                (double(x[j]) - m[size_t(c)]) * is[size_t(c)] * w[size_t(c)] + b[size_t(c)] + (with_z ? z[j] : 0.0);
            const double want = relu && pre <= 0 ? 0.0 : pre;
            ASSERT_NEAR(y[j], want, tol * (1 + std::fabs(pre))) << r << ", " << c;
            if (relu) {
              ASSERT_GE(y[j], 0.0f) << r << ", " << c;
              ASSERT_FALSE(std::signbit(y[j])) << "ReLU writes +0 " << r << ", " << c;
            }
            if (!plain.empty()) {
              const float sum = plain[j] + z[j];
              ASSERT_EQ(y[j], relu && sum <= 0 ? 0.0f : sum) << r << ", " << c;
            }
            if (relu) {
              // the mask is the forward's own decision: 0 exactly where y is (dy >= 0.25: never 0)
              ASSERT_EQ(g[j], y[j] == 0 ? 0.0f : dy[j]) << r << ", " << c;
              (y[j] == 0 ? zeros : passed)++;
            }
          }
      }
    EXPECT_GT(zeros, 100);  // both sides of the ReLU are exercised
    EXPECT_GT(passed, 100);
  }
}

// The ReLU's boundary: a pre-ReLU value of exactly 0 (x = mean, bias = -z, or bias = 0 without
// z) gives y = +0 and a masked gradient; the smallest positive values pass; -0 and NaN as apex
// (t <= 0 masks, NaN does not).
TEST(SyncbnRelu, BoundaryZeroTinyAndNaN) {
  const int64_t M = 3, C = 37;  // vector bodies (4, 8 or 16 lanes) and a scalar tail
  const float tiny = std::numeric_limits<float>::denorm_min();
  std::vector<float> m = draw(size_t(C), -1, 1, 81), is = draw(size_t(C), 0.5f, 2, 82),
                     w = draw(size_t(C), 0.5f, 1.5f, 83);
  std::vector<float> x(static_cast<size_t>(M * C)), z(static_cast<size_t>(M * C)), b(static_cast<size_t>(C));
  std::vector<float> dy = draw(size_t(M * C), 0.5f, 1, 84);
  for (int64_t c = 0; c < C; ++c) b[size_t(c)] = c % 3 == 0 ? -0.0f : c % 3 == 1 ? 0.5f : -0.25f;
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < C; ++c) {
      const size_t j = size_t(r * C + c);
      x[j] = m[size_t(c)];  // x - mean = 0 exactly
      z[j] = r == 0 ? -b[size_t(c)] : r == 1 ? tiny - b[size_t(c)] : -tiny - b[size_t(c)];
    }
  // b + z in f32: 0 (row 0); for b = +-0 exactly +-tiny (rows 1, 2), else it rounds to 0 or
  // keeps its sign; the expectation follows the f32 value t = b + z.
  std::vector<float> y, g;
  ASSERT_EQ(forward_last(DType::f32, M, C, x, &z, m, is, w, b, y, true), "");
  ASSERT_EQ(relu_backward(DType::f32, M, C, dy, x, &z, m, is, w, b, g), "");
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < C; ++c) {
      const size_t j = size_t(r * C + c);
      const float pre = b[size_t(c)] + z[j];
      SCOPED_TRACE("row " + std::to_string(r) + " channel " + std::to_string(c) + " pre " + std::to_string(pre));
      EXPECT_EQ(y[j], pre <= 0 ? 0.0f : pre);
      EXPECT_FALSE(std::signbit(y[j]));
      EXPECT_EQ(g[j], pre <= 0 ? 0.0f : dy[j]);
      if (r == 0) {
        EXPECT_EQ(g[j], 0.0f) << "an exact 0 is masked";
      }
      if (r == 1 && c % 3 == 0) {
        EXPECT_EQ(g[j], dy[j]) << "the smallest positive value passes";
      }
    }
  // without z: bias = 0 and x = mean give exactly 0 -> masked; bias = -0 too
  std::vector<float> b0(size_t(C), 0.0f), y0, g0;
  b0[1] = -0.0f;
  ASSERT_EQ(forward_last(DType::f32, M, C, x, nullptr, m, is, w, b0, y0, true), "");
  ASSERT_EQ(relu_backward(DType::f32, M, C, dy, x, nullptr, m, is, w, b0, g0), "");
  for (size_t j = 0; j < y0.size(); ++j) {
    EXPECT_EQ(y0[j], 0.0f) << j;
    EXPECT_FALSE(std::signbit(y0[j])) << j;
    EXPECT_EQ(g0[j], 0.0f) << j;
  }
  // NaN in x or z: y stays NaN (NaN <= 0 is false) and the gradient passes, in its element only
  std::vector<float> xn = draw(size_t(M * C), -1, 3, 85), zn = draw(size_t(M * C), -1, 1, 86), yn, gn;
  xn[4] = std::nanf("");
  zn[size_t(2 * C + 9)] = std::nanf("");
  ASSERT_EQ(forward_last(DType::f32, M, C, xn, &zn, m, is, w, b, yn, true), "");
  ASSERT_EQ(relu_backward(DType::f32, M, C, dy, xn, &zn, m, is, w, b, gn), "");
  for (size_t j = 0; j < yn.size(); ++j) {
    const bool nan = j == 4 || j == size_t(2 * C + 9);
    EXPECT_EQ(std::isnan(yn[j]), nan) << j;
    EXPECT_FALSE(std::isnan(gn[j])) << j;
    if (nan) EXPECT_EQ(gn[j], dy[j]) << j;
    else EXPECT_EQ(gn[j], yn[j] == 0 ? 0.0f : dy[j]) << j;
  }
}

// One row, one channel, and an empty batch (M = 0: nothing to write, no error).
TEST(SyncbnRelu, OneElementAndEmpty) {
  std::vector<float> x = {2.5f}, z = {-3.0f}, m = {0.5f}, is = {2.0f}, w = {0.75f}, b = {0.25f}, dy = {0.125f}, y, g;
  // t = (2.5 - 0.5) * (2 * 0.75) + 0.25 - 3 = 0.25 (exact in f32)
  ASSERT_EQ(forward_last(DType::f32, 1, 1, x, &z, m, is, w, b, y, true), "");
  EXPECT_EQ(y, std::vector<float>({0.25f}));
  ASSERT_EQ(relu_backward(DType::f32, 1, 1, dy, x, &z, m, is, w, b, g), "");
  EXPECT_EQ(g, std::vector<float>({0.125f}));
  z = {-3.5f};  // t = -0.25
  ASSERT_EQ(forward_last(DType::bf16, 1, 1, x, &z, m, is, w, b, y, true), "");
  EXPECT_EQ(y, std::vector<float>({0.0f}));
  ASSERT_EQ(relu_backward(DType::bf16, 1, 1, dy, x, &z, m, is, w, b, g), "");
  EXPECT_EQ(g, std::vector<float>({0.0f}));
  std::vector<float> e, m2 = {1, 2}, one = {1, 1}, ye, ge;
  ASSERT_EQ(forward_last(DType::f16, 0, 2, e, &e, m2, one, one, one, ye, true), "");
  ASSERT_EQ(relu_backward(DType::f16, 0, 2, e, e, nullptr, m2, one, one, one, ge), "");
  EXPECT_TRUE(ye.empty() && ge.empty());
}

TEST(SyncbnRelu, BadArgumentsNameTheArgumentAndWriteNothing) {
  const int64_t M = 6, C = 5;
  std::vector<float> x = draw(size_t(M * C), -1, 1, 91), ch = draw(size_t(C), 0.5f, 1, 92), y, g;
  auto nothing_written = [](const std::vector<float>& v) {
    for (float e : v)
      if (!std::isnan(e)) return false;
    return true;
  };
  // z of another shape, dtype; z given to the entry without one is an argument count error
  std::string err = run("forward_z_c_last", {{"x", &x, DType::f32, {M, C}},
                                             {"z", &x, DType::f32, {M, C - 1}},
                                             {"mean", &ch, DType::f32, {C}},
                                             {"invstd", &ch, DType::f32, {C}},
                                             {"weight", &ch, DType::f32, {C}},
                                             {"bias", &ch, DType::f32, {C}},
                                             {"y", &y, DType::f32, {M, C}}});
  EXPECT_NE(err.find("forward_z_c_last: argument 1 (z) has size 4 in dim 1, expected 5"), std::string::npos) << err;
  expect_one_line(err);
  EXPECT_TRUE(nothing_written(y));
  err = run("forward_z_c_last", {{"x", &x, DType::f32, {M, C}},
                                 {"z", &x, DType::f16, {M, C}},
                                 {"mean", &ch, DType::f32, {C}},
                                 {"invstd", &ch, DType::f32, {C}},
                                 {"weight", &ch, DType::f32, {C}},
                                 {"bias", &ch, DType::f32, {C}},
                                 {"y", &y, DType::f32, {M, C}}});
  EXPECT_NE(err.find("forward_z_c_last: argument 1 (z) has dtype f16, expected f32"), std::string::npos) << err;
  EXPECT_TRUE(nothing_written(y));
  err = run("relu_backward_z_c_last", {{"dy", &x, DType::f32, {M, C}},
                                       {"x", &x, DType::f32, {M, C}},
                                       {"z", &x, DType::f32, {M * C}},
                                       {"mean", &ch, DType::f32, {C}},
                                       {"invstd", &ch, DType::f32, {C}},
                                       {"weight", &ch, DType::f32, {C}},
                                       {"bias", &ch, DType::f32, {C}},
                                       {"dy_masked", &g, DType::f32, {M, C}}});
  EXPECT_NE(err.find("argument 2 (z)"), std::string::npos) << err;
  expect_one_line(err);
  EXPECT_TRUE(nothing_written(g));
  err = run("relu_backward_c_last", {{"dy", &x, DType::f32, {M, C}},
                                     {"x", &x, DType::f32, {M, C}},
                                     {"mean", &ch, DType::f32, {C}},
                                     {"invstd", &ch, DType::f32, {C}},
                                     {"weight", &ch, DType::f32, {C}},
                                     {"bias", &ch, DType::f32, {C + 1}},
                                     {"dy_masked", &g, DType::f32, {M, C}}});
  EXPECT_NE(err.find("relu_backward_c_last: argument 5 (bias) has size 6 in dim 0, expected 5"), std::string::npos)
      << err;
  EXPECT_TRUE(nothing_written(g));
  err = run("relu_backward_c_last", {{"dy", &x, DType::bf16, {M, C}},
                                     {"x", &x, DType::f32, {M, C}},
                                     {"mean", &ch, DType::f32, {C}},
                                     {"invstd", &ch, DType::f32, {C}},
                                     {"weight", &ch, DType::f32, {C}},
                                     {"bias", &ch, DType::f32, {C}},
                                     {"dy_masked", &g, DType::f32, {M, C}}});
  EXPECT_NE(err.find("relu_backward_c_last: argument 1 (x) has dtype f32, expected bf16"), std::string::npos) << err;
  EXPECT_TRUE(nothing_written(g));
  err = run("relu_backward_c_last", {{"dy", &x, DType::f32, {M, C}},
                                     {"x", &x, DType::f32, {M, C}},
                                     {"mean", &ch, DType::f32, {C}},
                                     {"invstd", &ch, DType::f32, {C}},
                                     {"weight", &ch, DType::f32, {C}},
                                     {"bias", &ch, DType::f32, {C}},
                                     {"dy_masked", &g, DType::f32, {M, C + 1}}});
  EXPECT_NE(err.find("argument 6 (dy_masked) has size 6 in dim 1, expected 5"), std::string::npos) << err;
  // there is no NCHW relu_backward (apex has none): an unknown entry at the module
  opf_call raw{"relu_backward", nullptr, 0, nullptr, 0, nullptr, nullptr};
  char msg[256] = "";
  EXPECT_NE(module()->run(module(), &raw, msg, sizeof msg), 0);
  EXPECT_NE(std::string(msg).find("unknown entry 'relu_backward'"), std::string::npos) << msg;
}

// ---------------------------------------------------------------- opforge op
TEST(SyncbnCli, BadInputsExit2WithOneLineAndWriteNothing) {
  OPF_REQUIRE_OPFORGE_EXE();
  TempDir t, io;
  const std::string D = t.path;
  write_npy(D + "/x.npy", {2, 3, 5}, draw(30, -1, 1, 61));
  write_npy(D + "/c3.npy", {3}, draw(3, 0.5f, 1.5f, 62));
  write_npy(D + "/c4.npy", {4}, draw(4, 0.5f, 1.5f, 63));
  write_npy(D + "/counts.npy", {2}, {10.0f, 3.5f});
  write_npy(D + "/k2c3.npy", {2, 3}, draw(6, 0.5f, 1.5f, 64));
  const std::vector<std::string> fwd = {"--entry", "forward",
                                        "--in",    "x=" + D + "/x.npy",
                                        "--in",    "mean=" + D + "/c3.npy",
                                        "--in",    "invstd=" + D + "/c3.npy",
                                        "--in",    "bias=" + D + "/c3.npy"};
  const std::vector<std::string> par = {"--entry", "welford_parallel",
                                        "--in",    "mean_all=" + D + "/k2c3.npy",
                                        "--in",    "var_all=" + D + "/k2c3.npy",
                                        "--in",    "count_all=" + D + "/counts.npy",
                                        "--in",    "running_mean=" + D + "/c3.npy",
                                        "--in",    "running_var=" + D + "/c3.npy"};
  auto with = [](std::vector<std::string> v, std::initializer_list<std::string> more) {
    v.insert(v.end(), more);
    return v;
  };
  const std::vector<BadCase> cases = {
      {"weight length", with(fwd, {"--in", "weight=" + D + "/c4.npy"}), "weight"},
      {"missing weight", fwd, "'weight'"},
      {"fractional count", par, "count_all"},
      {"missing z",
       {"--entry", "forward_z_c_last", "--in", "x=" + D + "/k2c3.npy", "--in", "mean=" + D + "/c3.npy", "--in",
        "invstd=" + D + "/c3.npy", "--in", "weight=" + D + "/c3.npy", "--in", "bias=" + D + "/c3.npy"},
       "'z'"},
      {"z shape",
       {"--entry", "forward_z_c_last", "--in", "x=" + D + "/k2c3.npy", "--in", "z=" + D + "/x.npy", "--in",
        "mean=" + D + "/c3.npy", "--in", "invstd=" + D + "/c3.npy", "--in", "weight=" + D + "/c3.npy", "--in",
        "bias=" + D + "/c3.npy"},
       "z"},
  };
  const std::string out = D + "/out";
  expect_refused("syncbn", cases, D, {"--out", out});
  // good calls infer the [C] statistics and y [N, C, HW] from the inputs
  Result ok = opforge_op("syncbn", io.path, {"--entry", "welford", "--in", "x=" + D + "/x.npy", "--out", out});
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_TRUE(fs::exists(out + "/mean.npy") && fs::exists(out + "/var_biased.npy"));
  ok = opforge_op("syncbn", io.path, with(fwd, {"--in", "weight=" + D + "/c3.npy", "--out", out + "2"}));
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_TRUE(fs::exists(out + "2/y.npy"));
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
