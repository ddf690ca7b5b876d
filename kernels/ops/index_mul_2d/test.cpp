// index_mul_2d — what the registry sweep cannot state: grad_in1's bits (the f32 sum over each
// target row's bucket in ascending row order, so the same bits for every thread count, checked
// bitwise against that sum computed here, on heavily repeated and on all-equal indices), rows of
// in1 no index points to (exact zeros), out-of-range indices (one line naming the position,
// nothing written, no read out of bounds), NaN staying in its column, one-row / one-element /
// empty / prime shapes, and malformed arguments; double_backward's bits likewise. Seeded inputs
// (seed printed); outputs poisoned with NaN before every call. Runs the module the loader gives
// this build (prebuilt or JIT).
#include <gtest/gtest.h>

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
constexpr uint64_t kSeed = 20251202;

const opf_module_info* module() {
  static const opf_module_info* m = [] {
    std::printf("seed %llu\n", (unsigned long long)kSeed);
    return opf::Loader::instance().load(*opf::find_op("index_mul_2d"), "cpu").info;
  }();
  return m;
}

// A tensor of dtype dt as bytes, with element access in double.
struct Buf {
  DType dt;
  std::vector<std::byte> bytes;
  Buf(DType d, size_t n) : dt(d), bytes(n * opf::dtype_size(d)) {}
  double at(int64_t i) const { return opf::load_element(dt, bytes.data(), i); }
  void set(int64_t i, double v) { opf::store_element(dt, bytes.data(), i, v); }
  void poison() {
    for (int64_t i = 0; i < int64_t(bytes.size() / opf::dtype_size(dt)); ++i) set(i, std::nan(""));
  }
  void* data() { return bytes.data(); }
};

struct Case {
  DType dt;
  int64_t m, n, f;
  Buf in1, in2, g, out, g1, g2;
  Buf gg1, gg2, ggo;  // double_backward: grad_grad_in1, grad_grad_in2, grad_grad_out
  std::vector<int64_t> idx;

  Case(DType d, int64_t m_, int64_t n_, int64_t f_, uint64_t salt = 0)
      : dt(d),
        m(m_),
        n(n_),
        f(f_),
        in1(d, size_t(m_ * f_)),
        in2(d, size_t(n_ * f_)),
        g(d, size_t(n_ * f_)),
        out(d, size_t(n_ * f_)),
        g1(d, size_t(m_ * f_)),
        g2(d, size_t(n_ * f_)),
        gg1(d, size_t(m_ * f_)),
        gg2(d, size_t(n_ * f_)),
        ggo(d, size_t(n_ * f_)),
        idx(size_t(n_)) {
    std::mt19937_64 rng(kSeed + salt);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    auto fill = [&](Buf& b, int64_t count) {
      for (int64_t i = 0; i < count; ++i) {
        double x;
        do x = -1 + 2 * u(rng);
        while (std::fabs(x) < 1e-3);  // never zero: hides scaling bugs
        b.set(i, x);
      }
    };
    fill(in1, m * f);
    fill(in2, n * f);
    fill(g, n * f);
    fill(gg1, m * f);
    fill(gg2, n * f);
    for (auto& v : idx) v = m > 0 ? int64_t(rng() % uint64_t(m)) : 0;
  }

  int forward(std::string* err = nullptr, int threads = 0) {
    out.poison();
    try {
      opf::CallBuilder b(*opf::find_op("index_mul_2d"), "forward");
      b.add("in1", in1.data(), dt, {m, f}).add("in2", in2.data(), dt, {n, f}).add("idx", idx.data(), DType::i64, {n});
      b.add("out", out.data(), dt, {n, f}).threads(threads);
      b.run(module());
      return 0;
    } catch (const opf::Error& e) {
      if (err) *err = e.what();
      return 1;
    }
  }
  int backward(std::string* err = nullptr, int threads = 0) {
    g1.poison();
    g2.poison();
    try {
      opf::CallBuilder b(*opf::find_op("index_mul_2d"), "backward");
      b.add("grad_out", g.data(), dt, {n, f}).add("in1", in1.data(), dt, {m, f}).add("in2", in2.data(), dt, {n, f});
      b.add("idx", idx.data(), DType::i64, {n})
          .add("grad_in1", g1.data(), dt, {m, f})
          .add("grad_in2", g2.data(), dt, {n, f});
      b.threads(threads).run(module());
      return 0;
    } catch (const opf::Error& e) {
      if (err) *err = e.what();
      return 1;
    }
  }

  int double_backward(std::string* err = nullptr, int threads = 0) {
    ggo.poison();
    g1.poison();
    g2.poison();
    try {
      opf::CallBuilder b(*opf::find_op("index_mul_2d"), "double_backward");
      b.add("grad_grad_in1", gg1.data(), dt, {m, f}).add("grad_grad_in2", gg2.data(), dt, {n, f});
      b.add("grad_out", g.data(), dt, {n, f}).add("in1", in1.data(), dt, {m, f}).add("in2", in2.data(), dt, {n, f});
      b.add("idx", idx.data(), DType::i64, {n}).add("grad_grad_out", ggo.data(), dt, {n, f});
      b.add("grad_in1", g1.data(), dt, {m, f}).add("grad_in2", g2.data(), dt, {n, f});
      b.threads(threads).run(module());
      return 0;
    } catch (const opf::Error& e) {
      if (err) *err = e.what();
      return 1;
    }
  }
  // double_backward's contract, bitwise: ggo = f32(gg1*in2) + f32(gg2*in1) rounded once,
  // grad_in2 = gg1*g, grad_in1 = the ascending f32 sum of gg2*g.
  void check_double() const {
    std::vector<float> s(size_t(m * f), 0.0f);
    for (int64_t i = 0; i < n * f; ++i) {
      const int64_t row = i / f, c = i % f, r = idx[size_t(row)] * f + c;
      expect_bits(ggo, i, double(float(product(gg1, r, in2, i)) + float(product(gg2, i, in1, r))), "grad_grad_out");
      expect_bits(g2, i, product(gg1, r, g, i), "grad_in2");
      s[size_t(r)] += float(product(gg2, i, g, i));
      if (HasFailure()) return;
    }
    for (int64_t i = 0; i < m * f; ++i) {
      expect_bits(g1, i, double(s[size_t(i)]), "grad_in1");
      if (HasFailure()) return;
    }
  }

  // The contract's bits: products in f32, rounded once; grad_in1 an f32 sum in ascending i.
  double product(const Buf& a, int64_t ai, const Buf& b, int64_t bi) const {
    return double(float(a.at(ai)) * float(b.at(bi)));
  }
  std::vector<float> grad_in1_sums() const {
    std::vector<float> s(size_t(m * f), 0.0f);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < f; ++c) s[size_t(idx[size_t(i)] * f + c)] += float(product(g, i * f + c, in2, i * f + c));
    return s;
  }
  // Bitwise: doubles of the stored values compare equal (NaN never equal, so an unwritten
  // poisoned element fails).
  void expect_bits(const Buf& got, int64_t i, double want, const char* what) const {
    Buf w(dt, 1);
    w.set(0, want);
    EXPECT_TRUE(got.at(i) == w.at(0) || (std::isnan(want) && std::isnan(got.at(i))))
        << what << "[" << i << "] = " << got.at(i) << ", want " << w.at(0);
  }
  void check_all() const {
    for (int64_t i = 0; i < n * f; ++i) {
      const int64_t row = i / f, c = i % f, r = idx[size_t(row)] * f + c;
      expect_bits(out, i, product(in1, r, in2, i), "out");
      expect_bits(g2, i, product(g, i, in1, r), "grad_in2");
      if (HasFailure()) return;
    }
    const auto s = grad_in1_sums();
    for (int64_t i = 0; i < m * f; ++i) {
      expect_bits(g1, i, double(s[size_t(i)]), "grad_in1");
      if (HasFailure()) return;
    }
  }
  static bool HasFailure() { return ::testing::Test::HasFailure(); }
};

const DType kDtypes[] = {DType::f32, DType::f16};

// Shapes at the edges: one element, one row, F below / at / above a vector and the column block,
// M > N (rows of in1 nothing points to), M < N (repeats), prime sizes.
TEST(IndexMul2d, EdgeShapesMatchTheContractBitwise) {
  const int64_t shapes[][3] = {{1, 1, 1},   {1, 1, 17},    {3, 1, 5},    {1, 9, 3},      {50, 7, 64},
                               {7, 50, 65}, {2, 31, 1023}, {5, 6, 1025}, {13, 101, 2053}};
  for (DType dt : kDtypes)
    for (const auto& s : shapes) {
      SCOPED_TRACE(std::string(opf::dtype_name(dt)) + " " + std::to_string(s[0]) + "x" + std::to_string(s[1]) + "x" +
                   std::to_string(s[2]));
      Case c(dt, s[0], s[1], s[2]);
      ASSERT_EQ(c.forward(), 0);
      ASSERT_EQ(c.backward(), 0);
      c.check_all();
      ASSERT_EQ(c.double_backward(), 0);
      c.check_double();
    }
}

// double_backward on repeated indices at 1-4 threads: the same bits, and the contract's.
TEST(IndexMul2d, DoubleBackwardIsTheSameBitsForEveryThreadCount) {
  for (DType dt : kDtypes) {
    Case c(dt, 5, 700, 1100, 7);
    ASSERT_EQ(c.double_backward(nullptr, 1), 0);
    c.check_double();
    const auto a = c.ggo.bytes, b = c.g1.bytes, d = c.g2.bytes;
    for (int threads : {2, 3, 4}) {
      ASSERT_EQ(c.double_backward(nullptr, threads), 0);
      EXPECT_TRUE(c.ggo.bytes == a && c.g1.bytes == b && c.g2.bytes == d) << opf::dtype_name(dt) << ", " << threads;
    }
    c.idx[699] = 5;
    std::string err;
    EXPECT_NE(c.double_backward(&err), 0);
    EXPECT_NE(err.find("double_backward: idx[699] = 5 is outside [0, 5)"), std::string::npos) << err;
    for (int64_t i = 0; i < c.n * c.f; ++i)
      ASSERT_TRUE(std::isnan(c.ggo.at(i))) << "grad_grad_out written despite the error";
  }
}

// Every index the same row, and few rows for many indices: long buckets; the bits are the
// ascending-order f32 sum for every thread count.
TEST(IndexMul2d, ScatterAddIsTheSameBitsForEveryThreadCount) {
  for (DType dt : kDtypes)
    for (int skew = 0; skew < 2; ++skew) {
      Case c(dt, skew ? 4 : 3, 3000, 1500, uint64_t(skew));
      if (skew) std::fill(c.idx.begin(), c.idx.end(), 2);
      ASSERT_EQ(c.backward(nullptr, 1), 0);
      const auto s = c.grad_in1_sums();
      for (int64_t i = 0; i < c.m * c.f && !::testing::Test::HasFailure(); ++i)
        c.expect_bits(c.g1, i, double(s[size_t(i)]), "grad_in1");
      const auto one = c.g1.bytes, one2 = c.g2.bytes;
      for (int threads : {2, 3, 4}) {
        ASSERT_EQ(c.backward(nullptr, threads), 0);
        EXPECT_TRUE(c.g1.bytes == one) << opf::dtype_name(dt) << " skew " << skew << ", " << threads << " threads";
        EXPECT_TRUE(c.g2.bytes == one2) << opf::dtype_name(dt) << " skew " << skew << ", " << threads << " threads";
      }
      if (skew) {  // rows 0, 1, 3: nothing points there, exact zeros
        for (int64_t r : {0, 1, 3})
          for (int64_t col = 0; col < c.f; ++col) ASSERT_EQ(c.g1.at(r * c.f + col), 0.0) << r << "," << col;
      }
    }
}

TEST(IndexMul2d, OutOfRangeIndexNamesThePositionAndWritesNothing) {
  for (DType dt : kDtypes)
    for (int64_t bad :
         {int64_t(-1), int64_t(10), std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()}) {
      Case c(dt, 10, 40, 8);
      c.idx[23] = bad;
      const std::string want = "idx[23] = " + std::to_string(bad) + " is outside [0, 10)";
      std::string err;
      EXPECT_NE(c.forward(&err), 0);
      EXPECT_NE(err.find("forward: " + want), std::string::npos) << err;
      EXPECT_EQ(err.find('\n'), std::string::npos) << err;
      for (int64_t i = 0; i < c.n * c.f; ++i) ASSERT_TRUE(std::isnan(c.out.at(i))) << "out written despite the error";
      EXPECT_NE(c.backward(&err), 0);
      EXPECT_NE(err.find("backward: " + want), std::string::npos) << err;
      for (int64_t i = 0; i < c.m * c.f; ++i)
        ASSERT_TRUE(std::isnan(c.g1.at(i))) << "grad_in1 written despite the error";
      for (int64_t i = 0; i < c.n * c.f; ++i)
        ASSERT_TRUE(std::isnan(c.g2.at(i))) << "grad_in2 written despite the error";
    }
}

// A NaN in grad_out[i, c] reaches grad_in1[idx[i], c] and grad_in2[i, c] only; an inf in in1
// reaches the out elements of the rows that gather it.
TEST(IndexMul2d, NonFiniteValuesStayInTheirColumn) {
  for (DType dt : kDtypes) {
    Case c(dt, 6, 20, 37);
    c.g.set(5 * 37 + 11, std::nan(""));
    c.in1.set(c.idx[7] * 37 + 3, std::numeric_limits<double>::infinity());
    ASSERT_EQ(c.forward(), 0);
    ASSERT_EQ(c.backward(), 0);
    c.check_all();
    EXPECT_TRUE(std::isnan(c.g1.at(c.idx[5] * 37 + 11)));
    EXPECT_TRUE(std::isinf(c.out.at(7 * 37 + 3)));
  }
}

TEST(IndexMul2d, EmptyIndexListZeroesGradIn1) {
  for (DType dt : kDtypes) {
    Case c(dt, 4, 0, 9);
    ASSERT_EQ(c.forward(), 0);
    ASSERT_EQ(c.backward(), 0);
    for (int64_t i = 0; i < 4 * 9; ++i) ASSERT_EQ(c.g1.at(i), 0.0) << i;
  }
}

// Malformed calls fail with one line naming the argument.
TEST(IndexMul2d, BadArgumentsFailWithAOneLineReason) {
  Case c(DType::f32, 5, 8, 6);
  std::vector<int32_t> idx32(8, 0);
  Buf bf(DType::bf16, 8 * 6), bf1(DType::bf16, 5 * 6), wide(DType::f32, 8 * 7), h(DType::f16, 8 * 6);
  auto fwd = [&](const std::function<void(opf::CallBuilder&)>& build) {
    try {
      opf::CallBuilder b(*opf::find_op("index_mul_2d"), "forward");
      build(b);
      b.run(module());
      return std::string();
    } catch (const opf::Error& e) {
      return std::string(e.what());
    }
  };
  struct Bad {
    const char* what;
    std::function<void(opf::CallBuilder&)> build;
    const char* needle;
  };
  const Bad bad[] = {
      {"in2 F",
       [&](opf::CallBuilder& b) {
         b.add("in1", c.in1.data(), DType::f32, {5, 6}).add("in2", wide.data(), DType::f32, {8, 7});
         b.add("idx", c.idx.data(), DType::i64, {8}).add("out", c.out.data(), DType::f32, {8, 6});
       },
       "in2) has F = 7 columns, in1 has 6"},
      {"in2 dtype",
       [&](opf::CallBuilder& b) {
         b.add("in1", c.in1.data(), DType::f32, {5, 6}).add("in2", h.data(), DType::f16, {8, 6});
         b.add("idx", c.idx.data(), DType::i64, {8}).add("out", c.out.data(), DType::f32, {8, 6});
       },
       "in2) has dtype f16, in1 has f32"},
      {"bf16",
       [&](opf::CallBuilder& b) {
         b.add("in1", bf1.data(), DType::bf16, {5, 6}).add("in2", bf.data(), DType::bf16, {8, 6});
         b.add("idx", c.idx.data(), DType::i64, {8}).add("out", bf.data(), DType::bf16, {8, 6});
       },
       "in1) has dtype bf16, expected f32 or f16"},
      {"idx dtype",
       [&](opf::CallBuilder& b) {
         b.add("in1", c.in1.data(), DType::f32, {5, 6}).add("in2", c.in2.data(), DType::f32, {8, 6});
         b.add("idx", idx32.data(), DType::i32, {8}).add("out", c.out.data(), DType::f32, {8, 6});
       },
       "idx"},
      {"idx length",
       [&](opf::CallBuilder& b) {
         b.add("in1", c.in1.data(), DType::f32, {5, 6}).add("in2", c.in2.data(), DType::f32, {8, 6});
         b.add("idx", c.idx.data(), DType::i64, {7}).add("out", c.out.data(), DType::f32, {8, 6});
       },
       "(idx) has size 7 in dim 0, expected 8"},
      {"out shape",
       [&](opf::CallBuilder& b) {
         b.add("in1", c.in1.data(), DType::f32, {5, 6}).add("in2", c.in2.data(), DType::f32, {8, 6});
         b.add("idx", c.idx.data(), DType::i64, {8}).add("out", c.out.data(), DType::f32, {6, 8});
       },
       "(out) has size 6 in dim 0, expected 8"},
      {"in1 1-D",
       [&](opf::CallBuilder& b) {
         b.add("in1", c.in1.data(), DType::f32, {30}).add("in2", c.in2.data(), DType::f32, {8, 6});
         b.add("idx", c.idx.data(), DType::i64, {8}).add("out", c.out.data(), DType::f32, {8, 6});
       },
       "(in1) has 1 dims, expected 2"},
  };
  for (const Bad& b : bad) {
    c.out.poison();
    const std::string err = fwd(b.build);
    EXPECT_NE(err.find(b.needle), std::string::npos) << b.what << ": " << err;
    EXPECT_EQ(err.find('\n'), std::string::npos) << err;
    for (int64_t i = 0; i < 8 * 6; ++i) ASSERT_TRUE(std::isnan(c.out.at(i))) << b.what << ": out written";
  }
  const opf_module_info* m = module();
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
