// focal_loss — edge cases the registry sweep cannot state as "match the reference": every gamma
// path (0, 1, 2 exact, 1.5 general) with and without smoothing on rows that are ignored (-2), have
// no positive (-1) or a positive at the first/last real class, on class counts that leave a scalar
// tail; exact zeros for ignored rows and padded classes even where their logits are NaN; NaN and
// inf logits staying in their element; saturated logits; label and shape errors (one line naming
// the row or argument, nothing written); the loss bits at any thread count; storage dtypes
// changing only loads and stores; backward scaling in place; the smallest shapes and N = 0.
// Seeded inputs (seed printed); outputs poisoned before every run. Runs the module the loader
// gives this build (prebuilt, or JIT-compiled in mode=jit), through the ABI.
#include <gtest/gtest.h>

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

constexpr uint64_t kSeed = 20261201;
constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();

enum class Bad { none, labels_length, labels_i32, loss_shape, grad_dtype, num_pos_f64 };

struct Hyper {
  int64_t real;
  double alpha = 0.25, gamma = 2.0, s = 0.0;
};

// One problem: logits as f32 values (stored in `dtype` for the call), labels; outputs read back
// as f32 values from whatever the kernel wrote.
struct Focal {
  int64_t N, C;
  DType dtype = DType::f32;
  std::vector<float> x;
  std::vector<int64_t> labels;
  float num_pos = 13.0f;
  float loss = kPoison;
  std::vector<float> grad;

  Focal(int64_t n, int64_t c, int64_t real, float lo = -8.0f, float hi = 4.0f)
      : N(n), C(c), x(size_t(n * c)), labels(size_t(n)) {
    std::mt19937_64 rng(kSeed);
    std::uniform_real_distribution<float> u(lo, hi);
    for (float& v : x) v = u(rng);
    for (int64_t r = 0; r < n; ++r) {
      const int64_t kind = r % 6;  // ignored, no positive, first class, last real class, random x2
      labels[size_t(r)] = kind == 0   ? -2
                          : kind == 1 ? -1
                          : kind == 2 ? 0
                          : kind == 3 ? real - 1
                                      : int64_t(rng() % uint64_t(real));
    }
  }
  float* row(int64_t r) { return &x[size_t(r * C)]; }

  static const opf::OpInfo& op() { return *opf::find_op("focal_loss"); }
  static const opf_module_info* module() { return opf::Loader::instance().load(op(), "cpu").info; }

  std::vector<std::byte> stored(const std::vector<float>& v) const {
    std::vector<std::byte> b(v.size() * opf::dtype_size(dtype));
    for (size_t i = 0; i < v.size(); ++i) opf::store_element(dtype, b.data(), int64_t(i), v[i]);
    return b;
  }
  std::vector<float> loaded(const std::vector<std::byte>& b) const {
    std::vector<float> v(b.size() / opf::dtype_size(dtype));
    for (size_t i = 0; i < v.size(); ++i) v[i] = float(opf::load_element(dtype, b.data(), int64_t(i)));
    return v;
  }

  opf::CallBuilder& params(opf::CallBuilder& call, const Hyper& h) const {
    return call.param("num_real_classes", double(h.real))
        .param("alpha", h.alpha)
        .param("gamma", h.gamma)
        .param("label_smoothing", h.s);
  }

  int forward(const Hyper& h, std::string* err = nullptr, Bad bad = Bad::none, int threads = 0) {
    loss = kPoison;
    std::vector<std::byte> xs = stored(x);
    std::vector<std::byte> out = stored(std::vector<float>(x.size(), kPoison));
    std::vector<int32_t> labels32(labels.begin(), labels.end());
    std::vector<int64_t> long_labels(labels);
    long_labels.push_back(0);
    std::vector<double> np64{num_pos};
    std::vector<double> grad64(x.size());
    float loss2[2] = {kPoison, kPoison};
    int rc = 0;
    try {
      opf::CallBuilder call(op(), "forward");
      params(call, h).threads(threads);
      call.add("logits", xs.data(), dtype, {N, C});
      if (bad == Bad::labels_length) call.add("labels", long_labels.data(), DType::i64, {N + 1});
      else if (bad == Bad::labels_i32) call.add("labels", labels32.data(), DType::i32, {N});
      else call.add("labels", labels.data(), DType::i64, {N});
      if (bad == Bad::num_pos_f64) call.add("num_positives_sum", np64.data(), DType::f64, {1});
      else call.add("num_positives_sum", &num_pos, DType::f32, {1});
      if (bad == Bad::loss_shape) call.add("loss", loss2, DType::f32, {2});
      else call.add("loss", &loss, DType::f32, {1});
      if (bad == Bad::grad_dtype) call.add("partial_grad", grad64.data(), DType::f64, {N, C});
      else call.add("partial_grad", out.data(), dtype, {N, C});
      call.run(module());
    } catch (const opf::Error& e) {
      if (err) *err = e.what();
      rc = 1;
    }
    grad = loaded(out);
    return rc;
  }

  // partial_grad *= g / num_pos, in place on `pg` (values stored in this problem's dtype)
  int backward(float g, std::vector<float>& pg, std::string* err = nullptr, int threads = 0) {
    std::vector<std::byte> b = stored(pg);
    int rc = 0;
    try {
      opf::CallBuilder call(op(), "backward");
      params(call, Hyper{80}).threads(threads);
      call.add("grad_loss", &g, DType::f32, {1});
      call.add("partial_grad", b.data(), dtype, {N, C});
      call.add("num_positives_sum", &num_pos, DType::f32, {1});
      call.run(module());
    } catch (const opf::Error& e) {
      if (err) *err = e.what();
      rc = 1;
    }
    pg = loaded(b);
    return rc;
  }
};

// float64 reference, written from the spec's formulas (not the kernel's rearrangement):
// BCE = max(-x,0) + log1p(e^-|x|) + (1-t) x; w = alpha (1-p)^gamma or (1-alpha) p^gamma.
struct Ref {
  double loss;
  std::vector<double> grad;
};
Ref reference(const Focal& f, const Hyper& h) {
  Ref out{0, std::vector<double>(f.x.size(), 0.0)};
  for (int64_t r = 0; r < f.N; ++r) {
    const int64_t y = f.labels[size_t(r)];
    if (y == -2) continue;
    for (int64_t c = 0; c < h.real; ++c) {
      const double x = f.x[size_t(r * f.C + c)];
      const double p = 1 / (1 + std::exp(-x)), q = 1 / (1 + std::exp(x));
      const bool pos = c == y;
      const double t = pos ? 1 - h.s / 2 : h.s / 2;
      const double bce = std::max(-x, 0.0) + std::log1p(std::exp(-std::fabs(x))) + (1 - t) * x;
      const double w = pos ? h.alpha * std::pow(q, h.gamma) : (1 - h.alpha) * std::pow(p, h.gamma);
      out.loss += w * bce;
      out.grad[size_t(r * f.C + c)] = pos ? w * (-h.gamma * p * bce + p - t) : w * (h.gamma * q * bce + p - t);
    }
  }
  out.loss /= double(f.num_pos);
  return out;
}

void expect_one_line(const std::string& err) { EXPECT_EQ(err.find('\n'), std::string::npos) << err; }

// Every element against the float64 reference: exact zeros where ignored or padded.
void expect_matches(const Focal& f, const Hyper& h, double rel) {
  const Ref ref = reference(f, h);
  EXPECT_NEAR(f.loss, ref.loss, rel * std::fabs(ref.loss)) << "loss";
  for (int64_t r = 0; r < f.N; ++r)
    for (int64_t c = 0; c < f.C; ++c) {
      const size_t i = size_t(r * f.C + c);
      if (f.labels[size_t(r)] == -2 || c >= h.real) {
        ASSERT_EQ(f.grad[i], 0.0f) << "row " << r << " col " << c << (c >= h.real ? " (padding)" : " (ignored row)");
        ASSERT_FALSE(std::signbit(f.grad[i])) << "row " << r << " col " << c;
        continue;
      }
      // (the gradient of p - t near its zero cancels: an absolute floor of a few f32 ulps of 1)
      ASSERT_NEAR(f.grad[i], ref.grad[i], rel * std::fabs(ref.grad[i]) + 1e-6) << "row " << r << " col " << c;
    }
}

TEST(FocalLossEdge, EveryGammaPathMatchesTheReference) {
  std::printf("seed %llu\n", (unsigned long long)kSeed);
  // 37 rows (prime), 19 real of 24 classes: a scalar tail after the vectors on every target
  for (double gamma : {0.0, 1.0, 2.0, 1.5}) {
    for (double s : {0.0, 0.1}) {
      SCOPED_TRACE("gamma " + std::to_string(gamma) + " smoothing " + std::to_string(s));
      Focal f(37, 24, 19);
      const Hyper h{19, 0.25, gamma, s};
      ASSERT_EQ(f.forward(h), 0);
      expect_matches(f, h, 2e-5);
    }
  }
  // alpha at its ends, every class real
  for (double alpha : {0.0, 1.0}) {
    Focal f(9, 32, 32);
    const Hyper h{32, alpha, 1.5, 0.2};
    ASSERT_EQ(f.forward(h), 0);
    expect_matches(f, h, 2e-5);
  }
}

// Saturated logits (|x| up to 1e4, where exp under/overflows): finite and accurate, no NaN from
// inf - inf or 0 * inf.
TEST(FocalLossEdge, SaturatedLogitsStayFinite) {
  Focal f(12, 16, 16);
  const float big[] = {-1e4f, -200.0f, -90.0f, -30.0f, -17.0f, 17.0f, 30.0f, 90.0f, 200.0f, 1e4f};
  for (size_t i = 0; i < f.x.size(); ++i) f.x[i] = big[i % 10] * (i % 3 == 0 ? 1.0f : 0.5f);
  for (double gamma : {0.0, 1.0, 2.0, 1.5}) {
    const Hyper h{16, 0.25, gamma, gamma == 1.5 ? 0.1 : 0.0};
    ASSERT_EQ(f.forward(h), 0);
    EXPECT_TRUE(std::isfinite(f.loss)) << "gamma " << gamma;
    for (float g : f.grad) ASSERT_TRUE(std::isfinite(g)) << "gamma " << gamma;
    expect_matches(f, h, 2e-5);
  }
}

// Ignored rows and padded classes are exact zeros whatever their logits hold, and add nothing:
// NaN there leaves the loss and every other element bit-identical.
TEST(FocalLossEdge, IgnoredRowsAndPaddingIgnoreNaN) {
  Focal clean(10, 40, 33), dirty(10, 40, 33);
  for (size_t i = 0; i < dirty.x.size(); ++i) {
    const int64_t r = int64_t(i) / dirty.C, c = int64_t(i) % dirty.C;
    if (dirty.labels[size_t(r)] == -2 || c >= 33) dirty.x[i] = (i % 2) ? std::nanf("") : INFINITY;
  }
  const Hyper h{33, 0.25, 1.5, 0.1};
  ASSERT_EQ(clean.forward(h), 0);
  ASSERT_EQ(dirty.forward(h), 0);
  EXPECT_EQ(std::memcmp(&clean.loss, &dirty.loss, 4), 0) << clean.loss << " vs " << dirty.loss;
  EXPECT_EQ(std::memcmp(clean.grad.data(), dirty.grad.data(), 4 * clean.grad.size()), 0);
  expect_matches(dirty, h, 2e-5);
}

// A NaN or inf logit of a real class makes its element and the loss NaN, nothing else.
TEST(FocalLossEdge, NonFiniteLogitStaysInItsElement) {
  for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    Focal clean(8, 24, 20), dirty(8, 24, 20);
    dirty.labels = clean.labels;
    dirty.labels[3] = 7;
    clean.labels[3] = 7;
    dirty.row(3)[7] = bad;   // the positive
    dirty.row(2)[19] = bad;  // a negative in the scalar tail of a no-positive row
    const Hyper h{20, 0.25, 2.0, 0.0};
    ASSERT_EQ(clean.forward(h), 0);
    ASSERT_EQ(dirty.forward(h), 0);
    EXPECT_TRUE(std::isnan(dirty.loss)) << bad;
    for (size_t i = 0; i < clean.grad.size(); ++i) {
      if (i == size_t(3 * 24 + 7) || i == size_t(2 * 24 + 19)) {
        EXPECT_TRUE(std::isnan(dirty.grad[i])) << bad << " element " << i;
        continue;
      }
      ASSERT_EQ(std::memcmp(&clean.grad[i], &dirty.grad[i], 4), 0) << bad << " element " << i;
    }
  }
}

TEST(FocalLossEdge, OutOfRangeLabelNamesTheRowAndWritesNothing) {
  for (int64_t badl : {int64_t(19), int64_t(-3), int64_t(1) << 40}) {
    Focal f(32, 24, 19);
    f.labels[17] = badl;
    std::string err;
    EXPECT_NE(f.forward(Hyper{19}, &err), 0);
    EXPECT_NE(err.find("forward: labels[17] = " + std::to_string(badl) + " is outside [-2, 19)"), std::string::npos)
        << err;
    expect_one_line(err);
    EXPECT_TRUE(std::isnan(f.loss)) << "loss written despite the error";
    for (float v : f.grad) ASSERT_TRUE(std::isnan(v)) << "partial_grad written despite the error";
  }
}

TEST(FocalLossEdge, BadShapesAndArgumentsFailWithOneLine) {
  struct Case {
    DType dtype;
    int64_t C, real;
    Bad bad;
    std::string want;
  };
  const std::vector<Case> cases = {
      {DType::f32, 22, 16, Bad::none, "argument 0 (logits) has Cpad = 22 classes, not a multiple of 4"},
      {DType::f16, 20, 16, Bad::none, "argument 0 (logits) has Cpad = 20 classes, not a multiple of 8"},
      {DType::bf16, 12, 8, Bad::none, "argument 0 (logits) has Cpad = 12 classes, not a multiple of 8"},
      {DType::f32, 24, 25, Bad::none, "num_real_classes = 25 exceeds Cpad = 24 of argument 0 (logits)"},
      {DType::f16, 24, 7, Bad::none, "num_real_classes = 7 is below 8"},
      {DType::f32, 24, 3, Bad::none, "num_real_classes = 3 is below 4"},
      {DType::f32, 24, 20, Bad::labels_length, "(labels) has size 8 in dim 0, expected 7"},
      {DType::f32, 24, 20, Bad::labels_i32, "(labels) has dtype i32, expected i64"},
      {DType::f32, 24, 20, Bad::num_pos_f64, "(num_positives_sum) has dtype f64, expected f32"},
      {DType::f32, 24, 20, Bad::loss_shape, "(loss) has size 2 in dim 0, expected 1"},
      {DType::f16, 24, 20, Bad::grad_dtype, "(partial_grad) has dtype f64, expected f16"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.want);
    Focal f(7, c.C, std::max<int64_t>(c.real, 1));
    for (int64_t& y : f.labels) y = std::min<int64_t>(y, 0);  // valid for any num_real_classes
    f.dtype = c.dtype;
    std::string err;
    EXPECT_NE(f.forward(Hyper{c.real}, &err, c.bad), 0);
    EXPECT_NE(err.find(c.want), std::string::npos) << err;
    expect_one_line(err);
    if (c.bad != Bad::loss_shape) {
      EXPECT_TRUE(std::isnan(f.loss)) << "loss written despite the error";
    }
  }
  // params outside their range: refused by the call builder (the manifest) and by the module
  Focal f(4, 16, 16);
  std::string err;
  EXPECT_NE(f.forward(Hyper{16, 0.25, -1.0, 0.0}, &err), 0);
  EXPECT_NE(err.find("gamma"), std::string::npos) << err;
  EXPECT_NE(f.forward(Hyper{16, 0.25, 2.0, 1.0}, &err), 0);
  EXPECT_NE(err.find("label_smoothing"), std::string::npos) << err;
  const opf_module_info* m = Focal::module();
  opf_call raw{"sideways", nullptr, 0, nullptr, 0, nullptr, nullptr};
  char msg[256] = "";
  EXPECT_NE(m->run(m, &raw, msg, sizeof msg), 0);
  EXPECT_NE(std::string(msg).find("sideways"), std::string::npos) << msg;
}

// The loss is a sum over many tasks: the same bits for 1, 2 and 3 threads (and the gradient).
TEST(FocalLossEdge, ThreadCountDoesNotChangeBits) {
  Focal f(6007, 96, 80);
  const Hyper h{80, 0.25, 1.5, 0.05};
  ASSERT_EQ(f.forward(h, nullptr, Bad::none, 1), 0);
  const float loss1 = f.loss;
  const std::vector<float> grad1 = f.grad;
  for (int threads : {2, 3}) {
    ASSERT_EQ(f.forward(h, nullptr, Bad::none, threads), 0);
    EXPECT_EQ(std::memcmp(&loss1, &f.loss, 4), 0) << threads << " threads: " << loss1 << " vs " << f.loss;
    EXPECT_EQ(std::memcmp(grad1.data(), f.grad.data(), 4 * grad1.size()), 0) << threads << " threads";
  }
  expect_matches(f, h, 2e-5);
}

// f16/bf16 change only loads and stores: on logits every dtype holds exactly, the loss is
// bit-identical to f32's and the gradient is f32's rounded once.
TEST(FocalLossEdge, StorageDtypesChangeOnlyLoadsAndStores) {
  Focal f32(11, 48, 41);
  for (float& v : f32.x) v = std::round(v * 8.0f) / 8.0f;
  const Hyper h{41, 0.3, 1.5, 0.1};
  ASSERT_EQ(f32.forward(h), 0);
  for (DType t : {DType::f16, DType::bf16}) {
    Focal g(11, 48, 41);
    g.x = f32.x;
    g.labels = f32.labels;
    g.dtype = t;
    ASSERT_EQ(g.forward(h), 0);
    EXPECT_EQ(std::memcmp(&g.loss, &f32.loss, 4), 0) << opf::dtype_name(t);
    for (size_t i = 0; i < f32.grad.size(); ++i) {
      std::byte b[8];
      opf::store_element(t, b, 0, f32.grad[i]);
      ASSERT_EQ(g.grad[i], float(opf::load_element(t, b, 0))) << opf::dtype_name(t) << " element " << i;
    }
  }
}

// The smallest problems: one row of one 16-byte vector of classes, every one real; N = 0.
TEST(FocalLossEdge, SmallestShapes) {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    const int64_t unit = 16 / int64_t(opf::dtype_size(t));
    for (int64_t y : {int64_t(-1), int64_t(0), unit - 1}) {
      Focal f(1, unit, unit);
      f.dtype = t;
      f.labels[0] = y;
      for (float& v : f.x) v = opf::dtype_size(t) == 4 ? v : float(opf::load_element(t, f.stored({v}).data(), 0));
      const Hyper h{unit, 0.25, 2.0, 0.0};
      ASSERT_EQ(f.forward(h), 0);
      expect_matches(f, h, t == DType::f32 ? 2e-5 : t == DType::f16 ? 2e-3 : 1.6e-2);
    }
  }
  Focal empty(0, 16, 16);
  ASSERT_EQ(empty.forward(Hyper{16}), 0);
  EXPECT_EQ(empty.loss, 0.0f);
}

// backward scales the saved gradient in place by grad_loss / num_positives_sum, in f32.
TEST(FocalLossEdge, BackwardScalesInPlace) {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    Focal f(13, 40, 33);  // 520 elements: whole vectors and a tail
    f.dtype = t;
    f.num_pos = 7.0f;
    std::vector<float> pg(f.x.size());
    for (size_t i = 0; i < pg.size(); ++i) pg[i] = float(opf::load_element(t, f.stored({f.x[i] / 8.0f}).data(), 0));
    std::vector<float> out = pg;
    ASSERT_EQ(f.backward(1.75f, out), 0);
    const float scale = 1.75f / 7.0f;
    for (size_t i = 0; i < pg.size(); ++i) {
      std::byte b[8];
      opf::store_element(t, b, 0, pg[i] * scale);
      ASSERT_EQ(out[i], float(opf::load_element(t, b, 0))) << opf::dtype_name(t) << " element " << i;
    }
  }
  // large enough for several tasks: the same bits at 1 and 3 threads
  Focal f(2000, 96, 80);
  std::vector<float> a(f.x), b(f.x);
  ASSERT_EQ(f.backward(0.5f, a, nullptr, 1), 0);
  ASSERT_EQ(f.backward(0.5f, b, nullptr, 3), 0);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), 4 * a.size()), 0);
  std::string err;
  Focal g(3, 16, 16);
  std::vector<float> pg(g.x);
  g.dtype = DType::f32;
  opf::CallBuilder call(Focal::op(), "backward");
  std::vector<double> g64{1.0};
  call.param("num_real_classes", 16.0).param("alpha", 0.25).param("gamma", 2.0).param("label_smoothing", 0.0);
  call.add("grad_loss", g64.data(), DType::f64, {1});
  call.add("partial_grad", pg.data(), DType::f32, {3, 16});
  call.add("num_positives_sum", &g.num_pos, DType::f32, {1});
  try {
    call.run(Focal::module());
    ADD_FAILURE() << "an f64 grad_loss was accepted";
  } catch (const opf::Error& e) {
    EXPECT_NE(std::string(e.what()).find("(grad_loss) has dtype f64, expected f32"), std::string::npos) << e.what();
    expect_one_line(e.what());
  }
  EXPECT_EQ(std::memcmp(pg.data(), g.x.data(), 4 * pg.size()), 0) << "partial_grad changed despite the error";
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
