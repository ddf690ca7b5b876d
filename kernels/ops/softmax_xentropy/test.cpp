// softmax_xentropy — edge cases the registry sweep cannot state as "match the reference": label
// errors (one line naming the row, nothing written), padding rows with smoothing and a negative
// padding_idx, s = 0 as plain cross entropy, C = 1, logits near the f32 limit, shift invariance,
// the gradient of a uniform row, NaN rows staying in their row, storage dtypes changing only the
// loads/stores, and malformed arguments. Seeded inputs (seed printed); outputs poisoned before
// every run. Runs the module the loader gives this build (prebuilt, or JIT-compiled in mode=jit),
// through the ABI.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
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

constexpr uint64_t kSeed = 20240917;
constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();

enum class Bad { none, labels_length, labels_i32, losses_shape, grad_dtype };

// One problem: logits as f32 values (stored in `dtype` for the call), labels, g; the outputs as
// f32 values read back from whatever the kernel wrote.
struct Xent {
  int64_t N, C;
  DType dtype = DType::f32;
  std::vector<float> x, g;
  std::vector<int64_t> labels;
  std::vector<float> loss, lse, dx;

  Xent(int64_t n, int64_t c, float lo = -8.0f, float hi = 8.0f)
      : N(n), C(c), x(size_t(n * c)), g(size_t(n)), labels(size_t(n)) {
    std::mt19937_64 rng(kSeed);
    std::uniform_real_distribution<float> u(lo, hi), ug(-1.0f, 1.0f);
    for (float& v : x) v = u(rng);
    for (float& v : g) v = ug(rng);
    for (int64_t& y : labels) y = int64_t(rng() % uint64_t(c));
  }
  float* row(int64_t r) { return &x[size_t(r * C)]; }

  static const opf::OpInfo& op() { return *opf::find_op("softmax_xentropy"); }
  static const opf_module_info* module() { return opf::Loader::instance().load(op(), "cpu").info; }

  // x in the storage dtype
  std::vector<std::byte> stored_logits() const {
    std::vector<std::byte> b(x.size() * opf::dtype_size(dtype));
    for (size_t i = 0; i < x.size(); ++i) opf::store_element(dtype, b.data(), int64_t(i), x[i]);
    return b;
  }

  int forward(double s, int64_t pad, std::string* err = nullptr, Bad bad = Bad::none, int threads = 0) {
    loss.assign(size_t(N), kPoison);
    lse.assign(size_t(N), kPoison);
    std::vector<std::byte> xs = stored_logits();
    std::vector<int32_t> labels32(labels.begin(), labels.end());
    std::vector<int64_t> long_labels(labels);
    long_labels.push_back(0);
    try {
      opf::CallBuilder call(op(), "forward");
      call.param("smoothing", s).param("padding_idx", double(pad)).threads(threads);
      call.add("logits", xs.data(), dtype, {N, C});
      if (bad == Bad::labels_length) call.add("labels", long_labels.data(), DType::i64, {N + 1});
      else if (bad == Bad::labels_i32) call.add("labels", labels32.data(), DType::i32, {N});
      else call.add("labels", labels.data(), DType::i64, {N});
      call.add("losses", loss.data(), DType::f32, {bad == Bad::losses_shape ? N - 1 : N});
      call.add("max_log_sum_exp", lse.data(), DType::f32, {N});
      call.run(module());
      return 0;
    } catch (const opf::Error& e) {
      if (err) *err = e.what();
      return 1;
    }
  }

  // backward with the given lse (default: this object's forward output)
  int backward(double s, int64_t pad, std::string* err = nullptr, Bad bad = Bad::none) {
    std::vector<std::byte> xs = stored_logits();
    std::vector<std::byte> out(x.size() * opf::dtype_size(dtype));
    for (size_t i = 0; i < x.size(); ++i) opf::store_element(dtype, out.data(), int64_t(i), kPoison);
    std::vector<int32_t> labels32(labels.begin(), labels.end());
    std::vector<double> g64(g.begin(), g.end());
    int rc = 0;
    try {
      opf::CallBuilder call(op(), "backward");
      call.param("smoothing", s).param("padding_idx", double(pad));
      if (bad == Bad::grad_dtype) call.add("grad_losses", g64.data(), DType::f64, {N});
      else call.add("grad_losses", g.data(), DType::f32, {N});
      call.add("logits", xs.data(), dtype, {N, C});
      call.add("max_log_sum_exp", lse.data(), DType::f32, {N});
      if (bad == Bad::labels_i32) call.add("labels", labels32.data(), DType::i32, {N});
      else call.add("labels", labels.data(), DType::i64, {N});
      call.add("grad_logits", out.data(), dtype, {N, C});
      call.run(module());
    } catch (const opf::Error& e) {
      if (err) *err = e.what();
      rc = 1;
    }
    dx.resize(x.size());
    for (size_t i = 0; i < x.size(); ++i) dx[i] = float(opf::load_element(dtype, out.data(), int64_t(i)));
    return rc;
  }
};

// float64 per-row reference (the stored values are the f32 values here)
struct Ref {
  double lse, loss;
  std::vector<double> dx;
};
// the gradient for a given saved lse (the backward's own input)
std::vector<double> reference_dx(const float* x, int64_t C, int64_t y, double g, double s, double lse) {
  std::vector<double> dx;
  for (int64_t c = 0; c < C; ++c)
    dx.push_back(g * (std::exp(double(x[c]) - lse) - (c == y ? 1 - s : 0.0) - s / double(C)));
  return dx;
}
Ref reference(const float* x, int64_t C, int64_t y, double g, double s) {
  Ref r;
  double m = -INFINITY;
  for (int64_t c = 0; c < C; ++c) m = std::max(m, double(x[c]));
  double sum = 0, shifted = 0;
  for (int64_t c = 0; c < C; ++c) {
    sum += std::exp(double(x[c]) - m);
    shifted += double(x[c]) - m;
  }
  r.lse = m + std::log(sum);
  r.loss = std::log(sum) + (1 - s) * (m - double(x[y])) - s / double(C) * shifted;
  for (int64_t c = 0; c < C; ++c)
    r.dx.push_back(g * (std::exp(double(x[c]) - m) / sum - (c == y ? 1 - s : 0.0) - s / double(C)));
  return r;
}

void expect_one_line(const std::string& err) { EXPECT_EQ(err.find('\n'), std::string::npos) << err; }

TEST(SoftmaxXentropyEdge, OutOfRangeLabelNamesTheRowAndWritesNothing) {
  std::printf("seed %llu\n", (unsigned long long)kSeed);
  Xent p(32, 1000);
  for (int64_t& y : p.labels) y = y == 0 ? 1 : y;  // no accidental padding rows
  p.labels[17] = 1000;
  std::string err;
  EXPECT_NE(p.forward(0.1, 0, &err), 0);
  EXPECT_NE(err.find("forward: labels[17] = 1000 is outside [0, 1000) and is not padding_idx 0"), std::string::npos)
      << err;
  expect_one_line(err);
  for (int64_t r = 0; r < p.N; ++r) {
    EXPECT_TRUE(std::isnan(p.loss[size_t(r)])) << "losses[" << r << "] written despite the error";
    EXPECT_TRUE(std::isnan(p.lse[size_t(r)])) << "max_log_sum_exp[" << r << "] written despite the error";
  }
  // negative labels, and a padding_idx that is not the bad value; backward checks the same way
  p.labels[17] = 3;
  p.labels[30] = -5;
  EXPECT_NE(p.forward(0.0, -100, &err), 0);
  EXPECT_NE(err.find("labels[30] = -5 is outside [0, 1000) and is not padding_idx -100"), std::string::npos) << err;
  p.labels[30] = 4;
  ASSERT_EQ(p.forward(0.0, -100), 0);
  p.labels[5] = 1000;
  EXPECT_NE(p.backward(0.0, -100, &err), 0);
  EXPECT_NE(err.find("backward: labels[5] = 1000 is outside [0, 1000) and is not padding_idx -100"), std::string::npos)
      << err;
  expect_one_line(err);
  for (float v : p.dx) EXPECT_TRUE(std::isnan(v)) << "grad_logits written despite the error";
}

// Padding rows: loss 0 and an exactly-zero gradient row with smoothing > 0, for a padding_idx that
// is a class (3) and one that is not (-100); even a NaN logit in a padding row stays there.
TEST(SoftmaxXentropyEdge, PaddingRowsGiveZeroLossAndGradWithSmoothing) {
  for (int64_t pad : {int64_t(3), int64_t(-100)}) {
    SCOPED_TRACE("padding_idx " + std::to_string(pad));
    Xent p(9, 37);
    for (int64_t r = 0; r < p.N; ++r)
      if (p.labels[size_t(r)] == pad) p.labels[size_t(r)] = pad + 1;
    for (int64_t r : {1, 4, 8}) p.labels[size_t(r)] = pad;
    p.row(4)[7] = std::nanf("");  // a NaN in a padding row
    ASSERT_EQ(p.forward(0.2, pad), 0);
    ASSERT_EQ(p.backward(0.2, pad), 0);
    for (int64_t r = 0; r < p.N; ++r) {
      const bool is_pad = r == 1 || r == 4 || r == 8;
      if (is_pad) {
        EXPECT_EQ(p.loss[size_t(r)], 0.0f) << "row " << r;
        EXPECT_EQ(std::signbit(p.loss[size_t(r)]), false) << "row " << r;
        for (int64_t c = 0; c < p.C; ++c) EXPECT_EQ(p.dx[size_t(r * p.C + c)], 0.0f) << "row " << r << " col " << c;
        // its lse is still written, like any row's (NaN for the NaN row)
        if (r == 4) EXPECT_TRUE(std::isnan(p.lse[size_t(r)]));
        else EXPECT_NEAR(p.lse[size_t(r)], reference(p.row(r), p.C, 0, 1, 0).lse, 1e-5);
        continue;
      }
      const Ref ref = reference(p.row(r), p.C, p.labels[size_t(r)], p.g[size_t(r)], 0.2);
      EXPECT_NEAR(p.loss[size_t(r)], ref.loss, 1e-5 * std::fabs(ref.loss) + 1e-6) << "row " << r;
      for (int64_t c = 0; c < p.C; ++c)
        EXPECT_NEAR(p.dx[size_t(r * p.C + c)], ref.dx[size_t(c)], 1e-6) << r << " " << c;
    }
  }
}

// s = 0: loss = -log softmax(x)_y, the plain cross entropy.
TEST(SoftmaxXentropyEdge, NoSmoothingIsPlainCrossEntropy) {
  Xent p(16, 1000);
  ASSERT_EQ(p.forward(0.0, -1), 0);
  for (int64_t r = 0; r < p.N; ++r) {
    const float* x = p.row(r);
    double sum = 0;
    for (int64_t c = 0; c < p.C; ++c) sum += std::exp(double(x[c]));
    const double ce = -std::log(std::exp(double(x[p.labels[size_t(r)]])) / sum);
    EXPECT_NEAR(p.loss[size_t(r)], ce, 2e-6 * ce) << "row " << r;
    EXPECT_NEAR(p.lse[size_t(r)], std::log(sum), 2e-6 * std::fabs(std::log(sum))) << "row " << r;
  }
}

// One class: softmax is 1, the loss 0 and lse = x for any smoothing; the gradient is 0 (exactly
// for s = 0: g * 1 - g).
// One class: softmax 1, target (1 - s) + s = 1, so loss and gradient are exactly 0 for every s
// (the sweep's 1x1 case once failed when the kernel formed g (1-s) + g s in two f32 products).
TEST(SoftmaxXentropyEdge, OneClass) {
  Xent p(64, 1);
  std::fill(p.labels.begin(), p.labels.end(), 0);
  for (double s : {0.0, 0.05215524137020111, 0.1, 0.3, 0.7, 0.999}) {
    ASSERT_EQ(p.forward(s, -100), 0);
    ASSERT_EQ(p.backward(s, -100), 0);
    for (int64_t r = 0; r < p.N; ++r) {
      EXPECT_EQ(p.loss[size_t(r)], 0.0f) << "s " << s << " row " << r;
      EXPECT_EQ(p.lse[size_t(r)], p.x[size_t(r)]) << "s " << s << " row " << r;
      EXPECT_EQ(p.dx[size_t(r)], 0.0f) << "s " << s << " row " << r << " g " << p.g[size_t(r)];
    }
  }
}

// Logits near the f32 limit (+-1e30) stay finite and correct: nothing is exponentiated but
// differences to the row max.
TEST(SoftmaxXentropyEdge, HugeLogitsStayFinite) {
  Xent p(4, 64);
  for (int64_t c = 0; c < p.C; ++c) {
    p.row(0)[c] = 1e30f;  // uniform at 1e30: loss log C
    p.row(1)[c] = c % 3 == 0 ? 1e30f : c % 3 == 1 ? -1e30f : 0.5f * float(c);
    p.row(2)[c] = -1e30f + float(c) * 1e23f;  // near -1e30, distinct
    p.row(3)[c] = c == 5 ? 1e30f : -1e30f;
  }
  p.labels = {7, 1, 63, 5};  // row 1: the label sits on a -1e30 logit
  for (double s : {0.0, 0.1}) {
    ASSERT_EQ(p.forward(s, -100), 0);
    for (int64_t r = 0; r < p.N; ++r) {
      const Ref ref = reference(p.row(r), p.C, p.labels[size_t(r)], 1, s);
      EXPECT_TRUE(std::isfinite(p.loss[size_t(r)])) << "s " << s << " row " << r;
      EXPECT_TRUE(std::isfinite(p.lse[size_t(r)])) << "s " << s << " row " << r;
      EXPECT_NEAR(p.loss[size_t(r)], ref.loss, 1e-6 * std::fabs(ref.loss) + 1e-5) << "s " << s << " row " << r;
      EXPECT_NEAR(p.lse[size_t(r)], ref.lse, 1e-6 * std::fabs(ref.lse)) << "s " << s << " row " << r;
    }
    // The gradient is exact given the saved lse; but an f32 lse of 1e30 has lost log C (ulp
    // ~1e23), so rows 0 and 1 get softmax 1 on their max entries instead of 1/64 and 1/22: a
    // limit of saving lse (apex's format), not of the kernel. Rows 2 and 3 have one max (S = 1).
    ASSERT_EQ(p.backward(s, -100), 0);
    for (int64_t r = 0; r < p.N; ++r) {
      const std::vector<double> given =
          reference_dx(p.row(r), p.C, p.labels[size_t(r)], p.g[size_t(r)], s, p.lse[size_t(r)]);
      const Ref ref = reference(p.row(r), p.C, p.labels[size_t(r)], p.g[size_t(r)], s);
      for (int64_t c = 0; c < p.C; ++c) {
        const float got = p.dx[size_t(r * p.C + c)];
        EXPECT_TRUE(std::isfinite(got)) << r << " " << c;
        EXPECT_NEAR(got, given[size_t(c)], 1e-6) << "s " << s << " row " << r << " col " << c;
        if (r >= 2) {
          EXPECT_NEAR(got, ref.dx[size_t(c)], 1e-6) << "s " << s << " row " << r << " col " << c;
        }
      }
    }
  }
}

// -inf logits are masked classes (a vocabulary mask): exp(-inf) = 0. With s = 0 the loss is the
// cross entropy over the other classes and their gradient is 0; with s > 0 the smoothing puts
// weight on them and the loss is +inf. A row that starts with a whole vector of -inf, and one
// with -inf in its scalar tail.
TEST(SoftmaxXentropyEdge, NegativeInfinityLogitsAreMaskedClasses) {
  Xent p(3, 67);
  for (int64_t c = 0; c < 40; ++c) p.row(0)[c] = -INFINITY;
  for (int64_t c = 0; c < p.C; c += 3) p.row(1)[c] = -INFINITY;
  p.row(2)[66] = -INFINITY;
  p.labels = {50, 1, 3};
  ASSERT_EQ(p.forward(0.0, -1), 0);
  ASSERT_EQ(p.backward(0.0, -1), 0);
  for (int64_t r = 0; r < p.N; ++r) {
    const float* x = p.row(r);
    double sum = 0;
    for (int64_t c = 0; c < p.C; ++c) sum += std::exp(double(x[c]));
    const double ce = std::log(sum) - double(x[p.labels[size_t(r)]]);
    EXPECT_NEAR(p.loss[size_t(r)], ce, 1e-5 * ce) << "row " << r;
    EXPECT_NEAR(p.lse[size_t(r)], std::log(sum), 1e-5) << "row " << r;
    const std::vector<double> want = reference_dx(x, p.C, p.labels[size_t(r)], p.g[size_t(r)], 0.0, p.lse[size_t(r)]);
    for (int64_t c = 0; c < p.C; ++c) {
      const float got = p.dx[size_t(r * p.C + c)];
      if (std::isinf(x[c])) {
        EXPECT_EQ(got, 0.0f) << "row " << r << " col " << c;
      } else {
        EXPECT_NEAR(got, want[size_t(c)], 1e-6) << "row " << r << " col " << c;
      }
    }
  }
  ASSERT_EQ(p.forward(0.1, -1), 0);
  for (int64_t r = 0; r < p.N; ++r) {
    EXPECT_EQ(p.loss[size_t(r)], INFINITY) << "row " << r;
    EXPECT_TRUE(std::isfinite(p.lse[size_t(r)])) << "row " << r;
  }
}

// The loss is shift invariant: logits on a 1/64 grid shifted by 80000 give exactly the same
// differences to the max, hence bit-identical losses; lse moves by the shift.
TEST(SoftmaxXentropyEdge, LossShiftInvariantFarBeyondExpRange) {
  Xent a(6, 300), b(6, 300);
  for (size_t i = 0; i < a.x.size(); ++i) {
    a.x[i] = std::round(a.x[i] * 64.0f) / 64.0f;
    b.x[i] = a.x[i] + 80000.0f;
  }
  b.labels = a.labels;
  for (double s : {0.0, 0.25}) {
    ASSERT_EQ(a.forward(s, -1), 0);
    ASSERT_EQ(b.forward(s, -1), 0);
    for (int64_t r = 0; r < a.N; ++r) {
      EXPECT_EQ(a.loss[size_t(r)], b.loss[size_t(r)]) << "s " << s << " row " << r;
      EXPECT_NEAR(b.lse[size_t(r)] - 80000.0, a.lse[size_t(r)], 0.01) << "row " << r;  // ulp(80000) ~ 0.008
    }
  }
}

// A uniform row: softmax 1/C everywhere, so dx = g (1/C - s/C) off the label and
// g (1/C - (1-s) - s/C) at it; the row sums to 0.
TEST(SoftmaxXentropyEdge, BackwardOfAUniformRow) {
  Xent p(3, 1000);
  for (float& v : p.x) v = 2.5f;
  p.labels = {0, 999, 500};
  const double s = 0.1;
  ASSERT_EQ(p.forward(s, -1), 0);
  ASSERT_EQ(p.backward(s, -1), 0);
  for (int64_t r = 0; r < p.N; ++r) {
    EXPECT_NEAR(p.loss[size_t(r)], std::log(1000.0), 1e-6) << "row " << r;
    const double g = p.g[size_t(r)];
    double row_sum = 0;
    for (int64_t c = 0; c < p.C; ++c) {
      const double want = g * (1e-3 - (c == p.labels[size_t(r)] ? 1 - s : 0.0) - s / 1000.0);
      const float got = p.dx[size_t(r * p.C + c)];
      EXPECT_NEAR(got, want, 2e-6 * std::fabs(g) * 1e-3 + 1e-7 * std::fabs(want)) << "row " << r << " col " << c;
      row_sum += got;
    }
    EXPECT_NEAR(row_sum, 0.0, 1e-6) << "row " << r;
  }
}

// A NaN logit makes its row's loss, lse and gradient NaN and leaves every other row bit-identical
// to a run without it.
TEST(SoftmaxXentropyEdge, NanStaysInItsRow) {
  Xent clean(8, 257), dirty(8, 257);
  dirty.labels = clean.labels;
  dirty.row(3)[100] = std::nanf("");
  for (Xent* p : {&clean, &dirty}) {
    ASSERT_EQ(p->forward(0.1, -1), 0);
    ASSERT_EQ(p->backward(0.1, -1), 0);
  }
  for (int64_t r = 0; r < clean.N; ++r) {
    if (r == 3) {
      EXPECT_TRUE(std::isnan(dirty.loss[3]) && std::isnan(dirty.lse[3]));
      for (int64_t c = 0; c < dirty.C; ++c) EXPECT_TRUE(std::isnan(dirty.dx[size_t(3 * dirty.C + c)])) << c;
      continue;
    }
    EXPECT_EQ(std::memcmp(&clean.loss[size_t(r)], &dirty.loss[size_t(r)], 4), 0) << "row " << r;
    EXPECT_EQ(std::memcmp(&clean.lse[size_t(r)], &dirty.lse[size_t(r)], 4), 0) << "row " << r;
    EXPECT_EQ(std::memcmp(&clean.dx[size_t(r * clean.C)], &dirty.dx[size_t(r * dirty.C)], size_t(clean.C) * 4), 0)
        << "row " << r;
  }
  // a NaN elsewhere in the row than the max is not dropped by the SIMD max: also in the tail
  Xent tail(2, 37);
  tail.row(0)[36] = std::nanf("");
  tail.row(1)[0] = std::nanf("");
  ASSERT_EQ(tail.forward(0.0, -1), 0);
  EXPECT_TRUE(std::isnan(tail.loss[0]) && std::isnan(tail.loss[1]));
}

// f16/bf16 change only loads and stores: on logits every dtype holds exactly, the losses and lse
// are bit-identical to f32's and the gradients are f32's rounded once.
TEST(SoftmaxXentropyEdge, StorageDtypesChangeOnlyLoadsAndStores) {
  Xent f32(6, 1000);
  for (float& v : f32.x) v = std::round(v * 8.0f) / 8.0f;  // |x| <= 8 on a 1/8 grid: exact in bf16 and f16
  ASSERT_EQ(f32.forward(0.1, 2), 0);
  ASSERT_EQ(f32.backward(0.1, 2), 0);
  for (DType t : {DType::f16, DType::bf16}) {
    Xent h(6, 1000);
    h.x = f32.x;
    h.labels = f32.labels;
    h.g = f32.g;
    h.dtype = t;
    ASSERT_EQ(h.forward(0.1, 2), 0);
    ASSERT_EQ(h.backward(0.1, 2), 0);
    EXPECT_EQ(std::memcmp(h.loss.data(), f32.loss.data(), 4 * f32.loss.size()), 0) << opf::dtype_name(t);
    EXPECT_EQ(std::memcmp(h.lse.data(), f32.lse.data(), 4 * f32.lse.size()), 0) << opf::dtype_name(t);
    for (size_t i = 0; i < f32.dx.size(); ++i) {
      std::byte b[8];  // (dtype.h's switch covers 8-byte dtypes)
      opf::store_element(t, b, 0, f32.dx[i]);
      ASSERT_EQ(h.dx[i], float(opf::load_element(t, b, 0))) << opf::dtype_name(t) << " element " << i;
    }
  }
}

// The result does not depend on the thread count (rows are independent).
TEST(SoftmaxXentropyEdge, ThreadCountDoesNotChangeBits) {
  Xent p(300, 2049);
  ASSERT_EQ(p.forward(0.1, 0, nullptr, Bad::none, 1), 0);
  const std::vector<float> loss1 = p.loss, lse1 = p.lse;
  ASSERT_EQ(p.forward(0.1, 0, nullptr, Bad::none, 3), 0);
  EXPECT_EQ(std::memcmp(loss1.data(), p.loss.data(), 4 * loss1.size()), 0);
  EXPECT_EQ(std::memcmp(lse1.data(), p.lse.data(), 4 * lse1.size()), 0);
}

TEST(SoftmaxXentropyEdge, BadArgumentsFailWithAOneLineReason) {
  Xent p(7, 13);
  std::string err;
  EXPECT_NE(p.forward(0.0, 0, &err, Bad::labels_length), 0);
  EXPECT_NE(err.find("labels"), std::string::npos) << err;
  EXPECT_NE(err.find("size 8"), std::string::npos) << err;
  expect_one_line(err);
  EXPECT_NE(p.forward(0.0, 0, &err, Bad::labels_i32), 0);
  EXPECT_NE(err.find("(labels) has dtype i32, expected i64"), std::string::npos) << err;
  EXPECT_NE(p.forward(0.0, 0, &err, Bad::losses_shape), 0);
  EXPECT_NE(err.find("losses"), std::string::npos) << err;
  for (float v : p.loss) EXPECT_TRUE(std::isnan(v)) << "output written despite the error";
  for (float v : p.lse) EXPECT_TRUE(std::isnan(v)) << "output written despite the error";
  ASSERT_EQ(p.forward(0.0, 0), 0);
  EXPECT_NE(p.backward(0.0, 0, &err, Bad::labels_i32), 0);
  EXPECT_NE(err.find("(labels) has dtype i32, expected i64"), std::string::npos) << err;
  for (float v : p.dx) EXPECT_TRUE(std::isnan(v)) << "output written despite the error";
  EXPECT_NE(p.backward(0.0, 0, &err, Bad::grad_dtype), 0);
  EXPECT_NE(err.find("grad_losses"), std::string::npos) << err;
  // smoothing outside [0, 1): refused by the call builder (the manifest's range) and the module
  EXPECT_NE(p.forward(1.0, 0, &err), 0);
  EXPECT_NE(err.find("smoothing"), std::string::npos) << err;
  const opf_module_info* m = Xent::module();
  opf_call raw{"sideways", nullptr, 0, nullptr, 0, nullptr, nullptr};
  char msg[256] = "";
  EXPECT_NE(m->run(m, &raw, msg, sizeof msg), 0);
  EXPECT_NE(std::string(msg).find("sideways"), std::string::npos) << msg;
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
