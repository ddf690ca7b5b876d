// transducer_loss — what the registry sweep cannot state as "match the reference": the loss and
// gradients against an independent brute force (every alignment of tiny lattices enumerated, in
// double), the gradient against finite differences of that brute force, lengths at their limits
// (f_len = 1, y_len = 0), a label equal to blank, -inf log-probs, packed = unpacked bit for bit,
// NaN staying in its batch, and bad input (one line naming the argument, nothing written). Seeded
// inputs (seed printed); outputs poisoned before every run. Runs the module the loader gives this
// build (prebuilt, or JIT-compiled in mode=jit), through the ABI.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "opforge/abi.h"
#include "opforge/call.h"
#include "opforge/dtype.h"
#include "opforge/error.h"
#include "opforge/loader.h"

namespace {

using opf::DType;

constexpr uint64_t kSeed = 20261201;
constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

const opf::OpInfo& op() { return *opf::find_op("transducer_loss"); }
const opf_module_info* module() { return opf::Loader::instance().load(op(), "cpu").info; }

// One problem in the padded layout [B, T, U1, V] (packed on the way in when asked). x holds
// log-probs (log_softmax of drawn logits) unless a test overwrites them.
struct Problem {
  int64_t B, T, U1, V, blank = 0;
  std::vector<float> x, g;
  std::vector<int64_t> label, f_len, y_len;
  // outputs (padded layout, read back as f32)
  std::vector<float> alpha, beta, loss, dx;

  Problem(int64_t b, int64_t t, int64_t u1, int64_t v, uint64_t seed = kSeed)
      : B(b),
        T(t),
        U1(u1),
        V(v),
        x(size_t(b * t * u1 * v)),
        g(size_t(b)),
        label(size_t(b * (u1 - 1))),
        f_len(size_t(b), t),
        y_len(size_t(b), u1 - 1) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(-3.0, 3.0), ug(0.25, 2.0);
    for (int64_t r = 0; r < b * t * u1; ++r) {
      double m = -kInf, s = 0;
      std::vector<double> z(static_cast<size_t>(v));
      for (double& e : z) m = std::max(m, e = u(rng));
      for (double e : z) s += std::exp(e - m);
      for (int64_t k = 0; k < v; ++k) x[size_t(r * v + k)] = float(z[size_t(k)] - m - std::log(s));
    }
    for (float& e : g) e = float(ug(rng));
    for (int64_t& y : label) y = int64_t(rng() % uint64_t(v));
  }
  float& lp(int64_t b, int64_t t, int64_t u, int64_t v) { return x[size_t(((b * T + t) * U1 + u) * V + v)]; }
  int64_t rows_packed() const {
    int64_t n = 0;
    for (int64_t b = 0; b < B; ++b) n += f_len[size_t(b)] * (y_len[size_t(b)] + 1);
    return n;
  }
  std::vector<int64_t> offsets() const {
    std::vector<int64_t> o;
    int64_t n = 0;
    for (int64_t b = 0; b < B; ++b) o.push_back(n += f_len[size_t(b)] * (y_len[size_t(b)] + 1));
    return o;
  }
  // x's rows in the packed layout (or the padded one), in `dtype`
  std::vector<std::byte> stored(DType dtype, bool packed) const {
    std::vector<std::byte> out;
    int64_t n = 0;
    const auto put = [&](int64_t r) {
      out.resize(size_t((n + 1) * V) * opf::dtype_size(dtype));
      for (int64_t k = 0; k < V; ++k) opf::store_element(dtype, out.data(), n * V + k, x[size_t(r * V + k)]);
      ++n;
    };
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t u = 0; u < U1; ++u)
          if (!packed || (t < f_len[size_t(b)] && u <= y_len[size_t(b)])) put((b * T + t) * U1 + u);
    return out;
  }

  struct Opts {
    bool packed = false, fused = false;
    DType dtype = DType::f32;
    int threads = 0;
    std::function<void(std::vector<int64_t>&)> edit_offsets = nullptr;  // bad-input tests
    bool label_i32 = false;
    int64_t x_rows_delta = 0;
  };

  int forward(const Opts& o, std::string* err = nullptr) {
    alpha.assign(size_t(B * T * U1), kPoison);
    beta.assign(size_t(B * T * U1), kPoison);
    loss.assign(size_t(B), kPoison);
    std::vector<std::byte> xs = stored(o.dtype, o.packed);
    std::vector<int64_t> off = o.packed ? offsets() : std::vector<int64_t>{};
    if (o.edit_offsets) o.edit_offsets(off);
    std::vector<int32_t> label32(label.begin(), label.end());
    try {
      opf::CallBuilder call(op(), "forward");
      call.param("blank_idx", double(blank)).param("packed_input", o.packed).threads(o.threads);
      if (o.packed) call.add("x", xs.data(), o.dtype, {rows_packed() + o.x_rows_delta, V});
      else call.add("x", xs.data(), o.dtype, {B, T, U1, V});
      if (o.label_i32) call.add("label", label32.data(), DType::i32, {B, U1 - 1});
      else call.add("label", label.data(), DType::i64, {B, U1 - 1});
      call.add("f_len", f_len.data(), DType::i64, {B});
      call.add("y_len", y_len.data(), DType::i64, {B});
      call.add("batch_offset", off.data(), DType::i64, {int64_t(off.size())});
      call.add("alpha", alpha.data(), DType::f32, {B, T, U1});
      call.add("beta", beta.data(), DType::f32, {B, T, U1});
      call.add("loss", loss.data(), DType::f32, {B});
      call.run(module());
      return 0;
    } catch (const opf::Error& e) {
      if (err) *err = e.what();
      return 1;
    }
  }

  // With this object's alpha and beta (its forward's). dx comes back in the padded layout
  // (packed: padding cells NaN, i.e. not part of the output).
  int backward(const Opts& o, std::string* err = nullptr) {
    std::vector<std::byte> xs = stored(o.dtype, o.packed);
    const int64_t rows = o.packed ? rows_packed() : B * T * U1;
    std::vector<std::byte> out(size_t(rows * V) * opf::dtype_size(o.dtype));
    for (int64_t i = 0; i < rows * V; ++i) opf::store_element(o.dtype, out.data(), i, kPoison);
    std::vector<int64_t> off = o.packed ? offsets() : std::vector<int64_t>{};
    if (o.edit_offsets) o.edit_offsets(off);
    int rc = 0;
    try {
      opf::CallBuilder call(op(), "backward");
      call.param("blank_idx", double(blank)).param("packed_input", o.packed).param("fuse_softmax_backward", o.fused);
      call.threads(o.threads);
      const opf::Shape xshape = o.packed ? opf::Shape{rows, V} : opf::Shape{B, T, U1, V};
      call.add("x", xs.data(), o.dtype, xshape);
      call.add("loss_grad", g.data(), DType::f32, {B});
      call.add("alpha", alpha.data(), DType::f32, {B, T, U1});
      call.add("beta", beta.data(), DType::f32, {B, T, U1});
      call.add("f_len", f_len.data(), DType::i64, {B});
      call.add("y_len", y_len.data(), DType::i64, {B});
      call.add("label", label.data(), DType::i64, {B, U1 - 1});
      call.add("batch_offset", off.data(), DType::i64, {int64_t(off.size())});
      call.add("x_grad", out.data(), o.dtype, xshape);
      call.run(module());
    } catch (const opf::Error& e) {
      if (err) *err = e.what();
      rc = 1;
    }
    dx.assign(x.size(), kPoison);
    int64_t n = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t u = 0; u < U1; ++u) {
          if (o.packed && !(t < f_len[size_t(b)] && u <= y_len[size_t(b)])) continue;
          for (int64_t k = 0; k < V; ++k)
            dx[size_t(((b * T + t) * U1 + u) * V + k)] = float(opf::load_element(o.dtype, out.data(), n * V + k));
          ++n;
        }
    return rc;
  }
};

// ---------------------------------------------------------------- brute force (independent)
// Every alignment of batch b: a sequence of Tf - 1 blank moves and Uy label moves through the
// lattice from (0, 0), then the final blank at (Tf - 1, Uy). P = sum over alignments of the
// product of their emission probabilities; loss = -log P. dloss/dlp(t,u,v) = -(sum over
// alignments of P_path * [edge (t,u,v) used]) / P.
struct Brute {
  double loss;
  std::vector<double> dlp;  // [T, U1, V] for batch b (0 outside its lattice)
};
Brute brute(const Problem& p, int64_t b, const std::vector<double>* lp_override = nullptr) {
  const int64_t Tf = p.f_len[size_t(b)], Uy = p.y_len[size_t(b)], moves = Tf - 1 + Uy;
  const auto lp = [&](int64_t t, int64_t u, int64_t v) {
    const size_t i = size_t((t * p.U1 + u) * p.V + v);
    return lp_override ? (*lp_override)[i] : double(p.x[size_t(b * p.T * p.U1 * p.V) + i]);
  };
  Brute r{0, std::vector<double>(size_t(p.T * p.U1 * p.V), 0.0)};
  double total = 0;
  std::vector<std::vector<size_t>> edges;
  std::vector<double> probs;
  for (uint64_t mask = 0; mask < (uint64_t(1) << moves); ++mask) {
    if (__builtin_popcountll(mask) != Uy) continue;  // bit k set: move k emits a label
    int64_t t = 0, u = 0;
    double logp = 0;
    std::vector<size_t> used;
    for (int64_t k = 0; k < moves; ++k) {
      const bool emit = (mask >> k) & 1;
      const int64_t v = emit ? p.label[size_t(b * (p.U1 - 1) + u)] : p.blank;
      logp += lp(t, u, v);
      used.push_back(size_t((t * p.U1 + u) * p.V + v));
      if (emit) ++u;
      else ++t;
    }
    logp += lp(Tf - 1, Uy, p.blank);
    used.push_back(size_t(((Tf - 1) * p.U1 + Uy) * p.V + p.blank));
    probs.push_back(std::exp(logp));
    edges.push_back(used);
    total += probs.back();
  }
  r.loss = -std::log(total);
  for (size_t k = 0; k < probs.size(); ++k)
    for (size_t e : edges[k]) r.dlp[e] -= probs[k] / total;
  return r;
}

void expect_one_line(const std::string& err) { EXPECT_EQ(err.find('\n'), std::string::npos) << err; }

// Every lattice of T, U <= 3 (f_len 1..3, y_len 0..2), with a label equal to blank in some: the
// loss, the unfused gradient (d loss / d lp) and the fused one (d loss / d logits via the chain
// rule through log_softmax) against the enumeration.
TEST(TransducerLossEdge, MatchesBruteForceOnEveryTinyLattice) {
  std::printf("seed %llu\n", (unsigned long long)kSeed);
  Problem p(9, 3, 3, 4);
  p.blank = 2;
  for (int64_t b = 0; b < 9; ++b) {
    p.f_len[size_t(b)] = 1 + b / 3;
    p.y_len[size_t(b)] = b % 3;
  }
  p.label[size_t(5 * 2 + 1)] = p.blank;  // batch 5: its second label is the blank symbol
  for (bool packed : {false, true}) {
    SCOPED_TRACE(packed ? "packed" : "padded");
    ASSERT_EQ(p.forward({.packed = packed}), 0);
    Problem q = p;
    ASSERT_EQ(q.backward({.packed = packed, .fused = false}), 0);
    Problem f = p;
    ASSERT_EQ(f.backward({.packed = packed, .fused = true}), 0);
    for (int64_t b = 0; b < p.B; ++b) {
      SCOPED_TRACE("batch " + std::to_string(b));
      const Brute r = brute(p, b);
      EXPECT_NEAR(p.loss[size_t(b)], r.loss, 2e-6 * std::fabs(r.loss) + 1e-6);
      for (int64_t t = 0; t < p.T; ++t)
        for (int64_t u = 0; u < p.U1; ++u) {
          const bool in = t < p.f_len[size_t(b)] && u <= p.y_len[size_t(b)];
          double occ = 0;  // the cell's occupancy: minus the sum of its unfused gradient
          for (int64_t v = 0; v < p.V; ++v) occ -= r.dlp[size_t((t * p.U1 + u) * p.V + v)];
          for (int64_t v = 0; v < p.V; ++v) {
            const size_t i = size_t(((b * p.T + t) * p.U1 + u) * p.V + v), j = size_t((t * p.U1 + u) * p.V + v);
            const double gb = p.g[size_t(b)];
            const double want = gb * r.dlp[j];
            const double want_fused = gb * (r.dlp[j] + occ * std::exp(double(p.x[i])));
            if (!in && packed) continue;
            EXPECT_NEAR(q.dx[i], want, 2e-6 * std::fabs(gb) + 1e-6) << t << " " << u << " " << v;
            EXPECT_NEAR(f.dx[i], want_fused, 2e-6 * std::fabs(gb) + 1e-6) << t << " " << u << " " << v;
            if (!in) {
              EXPECT_EQ(q.dx[i], 0.0f);
              EXPECT_EQ(f.dx[i], 0.0f);
            }
          }
          if (!in) {  // outside the lattice: -inf
            EXPECT_EQ(p.alpha[size_t((b * p.T + t) * p.U1 + u)], -INFINITY);
            EXPECT_EQ(p.beta[size_t((b * p.T + t) * p.U1 + u)], -INFINITY);
          }
        }
    }
  }
}

// The brute-force loss differentiated numerically (central differences in double, on the
// log-probs directly, and on logits through log_softmax for the fused gradient).
TEST(TransducerLossEdge, GradientMatchesFiniteDifferences) {
  Problem p(1, 3, 3, 3, kSeed + 1);
  p.blank = 1;
  ASSERT_EQ(p.forward({}), 0);
  Problem q = p, f = p;
  ASSERT_EQ(q.backward({.fused = false}), 0);
  ASSERT_EQ(f.backward({.fused = true}), 0);
  const double h = 1e-5, gb = p.g[0];
  std::vector<double> lp(p.x.begin(), p.x.end());
  for (size_t i = 0; i < lp.size(); ++i) {
    std::vector<double> a = lp, c = lp;
    a[i] += h;
    c[i] -= h;
    const double fd = gb * (brute(p, 0, &a).loss - brute(p, 0, &c).loss) / (2 * h);
    EXPECT_NEAR(q.dx[i], fd, 1e-5) << "lp " << i;
  }
  // logits z = lp (log_softmax(lp) = lp, as lp is normalised): perturb z, renormalise its row
  for (size_t i = 0; i < lp.size(); ++i) {
    const size_t row = i / size_t(p.V) * size_t(p.V);
    const auto normalised = [&](double dz) {
      std::vector<double> z = lp;
      z[i] += dz;
      double s = 0;
      for (int64_t k = 0; k < p.V; ++k) s += std::exp(z[row + size_t(k)]);
      for (int64_t k = 0; k < p.V; ++k) z[row + size_t(k)] -= std::log(s);
      return z;
    };
    const std::vector<double> a = normalised(h), c = normalised(-h);
    const double fd = gb * (brute(p, 0, &a).loss - brute(p, 0, &c).loss) / (2 * h);
    EXPECT_NEAR(f.dx[i], fd, 1e-5) << "logit " << i;
  }
}

// f_len = 1 and y_len = 0: one cell, loss = -lp(0, 0, blank); its gradient is -g at the blank
// (fused: g (softmax - one-hot blank)).
TEST(TransducerLossEdge, OneCellLattice) {
  Problem p(2, 1, 1, 5);
  p.blank = 4;
  ASSERT_EQ(p.forward({}), 0);
  for (int64_t b = 0; b < 2; ++b) {
    EXPECT_EQ(p.loss[size_t(b)], -p.lp(b, 0, 0, 4));
    EXPECT_EQ(p.alpha[size_t(b)], 0.0f);
    EXPECT_EQ(p.beta[size_t(b)], p.lp(b, 0, 0, 4));
  }
  for (bool fused : {false, true}) {
    Problem q = p;
    ASSERT_EQ(q.backward({.fused = fused}), 0);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t v = 0; v < 5; ++v) {
        const double gb = p.g[size_t(b)];
        const double want = gb * ((fused ? std::exp(double(p.lp(b, 0, 0, v))) : 0.0) - (v == 4 ? 1.0 : 0.0));
        EXPECT_NEAR(q.dx[size_t(b * 5 + v)], want, 1e-6) << "fused " << fused << " b " << b << " v " << v;
      }
  }
}

// -inf log-probs (tokens a model rules out) are ordinary: paths through them weigh 0.
TEST(TransducerLossEdge, MinusInfinityLogProbs) {
  Problem p(2, 3, 3, 3);
  p.blank = 0;
  for (int64_t b = 0; b < 2; ++b) {
    p.lp(b, 0, 0, p.blank) = -INFINITY;  // no blank first: a label must come first
    p.lp(b, 1, 1, 2) = -INFINITY;
    p.lp(b, 2, 0, 1) = -INFINITY;
  }
  ASSERT_EQ(p.forward({}), 0);
  Problem f = p;
  ASSERT_EQ(f.backward({.fused = true}), 0);
  for (int64_t b = 0; b < 2; ++b) {
    const Brute r = brute(p, b);
    ASSERT_TRUE(std::isfinite(r.loss));
    EXPECT_NEAR(p.loss[size_t(b)], r.loss, 2e-6 * std::fabs(r.loss));
  }
  for (size_t i = 0; i < f.dx.size(); ++i) {
    EXPECT_TRUE(std::isfinite(f.dx[i])) << i;
    if (p.x[i] == -INFINITY) {
      EXPECT_EQ(f.dx[i], 0.0f) << i;
    }
  }
}

// Packed and padded layouts compute the same numbers, bit for bit, at any thread count.
TEST(TransducerLossEdge, PackedEqualsPaddedAtAnyThreadCount) {
  Problem p(5, 7, 5, 37);
  p.blank = 3;
  const int64_t fl[5] = {7, 1, 4, 7, 2}, yl[5] = {4, 4, 0, 2, 1};
  for (int64_t b = 0; b < 5; ++b) p.f_len[size_t(b)] = fl[b], p.y_len[size_t(b)] = yl[b];
  ASSERT_EQ(p.forward({.threads = 1}), 0);
  for (bool fused : {false, true}) {
    Problem base = p;
    ASSERT_EQ(base.backward({.fused = fused, .threads = 1}), 0);
    for (int threads : {2, 3})
      for (bool packed : {false, true}) {
        SCOPED_TRACE("threads " + std::to_string(threads) + (packed ? " packed" : " padded") + (fused ? " fused" : ""));
        Problem q = p;
        ASSERT_EQ(q.forward({.packed = packed, .threads = threads}), 0);
        EXPECT_EQ(0, std::memcmp(q.alpha.data(), p.alpha.data(), p.alpha.size() * 4));
        EXPECT_EQ(0, std::memcmp(q.beta.data(), p.beta.data(), p.beta.size() * 4));
        EXPECT_EQ(0, std::memcmp(q.loss.data(), p.loss.data(), p.loss.size() * 4));
        ASSERT_EQ(q.backward({.packed = packed, .fused = fused, .threads = threads}), 0);
        for (size_t i = 0; i < q.dx.size(); ++i)
          if (!(packed && std::isnan(q.dx[i]))) {
            ASSERT_EQ(std::memcmp(&q.dx[i], &base.dx[i], 4), 0) << i;
          }
      }
  }
}

// A NaN log-prob on batch 1's lattice makes batch 1 NaN only; NaNs off the lattice's edges stay in
// their own (fused) gradient element.
TEST(TransducerLossEdge, NanStaysInItsBatch) {
  Problem p(3, 4, 3, 6);
  p.lp(1, 2, 1, p.blank) = NAN;
  p.lp(2, 3, 2, 5) = NAN;        // batch 2: not an edge (label or blank) of its lattice
  p.lp(0, 3, 0, p.blank) = NAN;  // batch 0: a blank of the last frame that leaves the lattice
  for (int64_t& y : p.label) y = y == 5 ? 4 : y;
  ASSERT_EQ(p.forward({}), 0);
  EXPECT_TRUE(std::isnan(p.loss[1]));
  EXPECT_TRUE(std::isfinite(p.loss[0]));
  EXPECT_TRUE(std::isfinite(p.loss[2]));
  Problem q = p;
  ASSERT_EQ(q.backward({.fused = false}), 0);
  const size_t per = size_t(p.T * p.U1 * p.V);
  for (size_t i = 0; i < q.dx.size(); ++i) {
    if (i / per != 1) {
      EXPECT_TRUE(std::isfinite(q.dx[i])) << i;
    }
  }
  Problem f = p;
  ASSERT_EQ(f.backward({.fused = true}), 0);
  for (size_t i = 0; i < f.dx.size(); ++i) {
    if (i == size_t((3 * p.U1 + 0) * p.V + p.blank)) {
      EXPECT_TRUE(std::isnan(f.dx[i]));  // exp(occupancy + NaN): its own element only
    } else if (i / per == 0) {
      EXPECT_TRUE(std::isfinite(f.dx[i])) << i;
    } else if (i / per == 1) {
      EXPECT_TRUE(std::isnan(f.dx[i])) << i;
    }
  }
  EXPECT_TRUE(std::isnan(f.dx[size_t(((2 * p.T + 3) * p.U1 + 2) * p.V + 5)]));  // its own element only
  EXPECT_TRUE(std::isfinite(f.dx[size_t(((2 * p.T + 3) * p.U1 + 2) * p.V + 4)]));
}

// Bad input: one line naming the argument; nothing written.
TEST(TransducerLossEdge, BadInputNamesTheArgumentAndWritesNothing) {
  Problem p(3, 4, 3, 6);
  const auto untouched = [&](const Problem& q) {
    for (float v : q.alpha) ASSERT_TRUE(std::isnan(v)) << "alpha written despite the error";
    for (float v : q.loss) ASSERT_TRUE(std::isnan(v)) << "loss written despite the error";
  };
  const auto expect_error = [&](Problem q, const Problem::Opts& o, const std::string& what) {
    std::string err;
    EXPECT_NE(q.forward(o, &err), 0) << what;
    EXPECT_NE(err.find(what), std::string::npos) << err;
    expect_one_line(err);
    untouched(q);
  };
  {
    Problem q = p;
    q.label[size_t(1 * 2 + 1)] = 6;
    expect_error(q, {}, "forward: label[1, 1] = 6 is outside [0, 6)");
    q.label[size_t(1 * 2 + 1)] = -1;
    expect_error(q, {}, "forward: label[1, 1] = -1 is outside [0, 6)");
    q.y_len[1] = 1;  // the bad label is past y_len: padding, never read
    EXPECT_EQ(q.forward({}), 0);
  }
  {
    Problem q = p;
    q.f_len[2] = 0;
    expect_error(q, {}, "forward: f_len[2] = 0 is outside [1, 4]");
    q.f_len[2] = 5;
    expect_error(q, {}, "forward: f_len[2] = 5 is outside [1, 4]");
    q.f_len[2] = 4;
    q.y_len[0] = 3;
    expect_error(q, {}, "forward: y_len[0] = 3 is outside [0, 2]");
    q.y_len[0] = -1;
    expect_error(q, {}, "forward: y_len[0] = -1 is outside [0, 2]");
  }
  {
    Problem q = p;
    q.blank = 6;
    expect_error(q, {}, "blank_idx");
  }
  expect_error(p, {.label_i32 = true}, "(label) has dtype i32, expected i64");
  expect_error(p, {.packed = true, .edit_offsets = [](std::vector<int64_t>& o) { std::swap(o[0], o[1]); }},
               "forward: batch_offset[1] = 12 is below batch_offset[0] = 24 (it must be non-decreasing)");
  expect_error(p, {.packed = true, .edit_offsets = [](std::vector<int64_t>& o) { o[1] += 1; }},
               "forward: batch_offset[1] = 25, expected 24");
  expect_error(p, {.packed = true, .x_rows_delta = -1},
               "forward: argument 0 (x) has 35 rows, expected batch_offset[B-1] = 36");
  expect_error(p, {.edit_offsets = [](std::vector<int64_t>& o) { o.assign(3, 0); }},
               "forward: argument 4 (batch_offset) has size 3 in dim 0, expected 0");
  // backward checks the same way, and writes nothing
  Problem q = p;
  ASSERT_EQ(q.forward({}), 0);
  q.label[0] = 99;
  std::string err;
  EXPECT_NE(q.backward({.fused = true}, &err), 0);
  EXPECT_NE(err.find("backward: label[0, 0] = 99 is outside [0, 6)"), std::string::npos) << err;
  expect_one_line(err);
  for (float v : q.dx) ASSERT_TRUE(std::isnan(v)) << "x_grad written despite the error";
  q.label[0] = 1;
  EXPECT_NE(q.backward({.packed = true, .edit_offsets = [](std::vector<int64_t>& o) { o[2] = 5; }}, &err), 0);
  EXPECT_NE(err.find("backward: batch_offset[2] = 5 is below batch_offset[1] = 24"), std::string::npos) << err;
  for (float v : q.dx) ASSERT_TRUE(std::isnan(v)) << "x_grad written despite the error";
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
