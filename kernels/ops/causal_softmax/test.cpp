// causal_softmax — edge cases the registry sweep cannot state as "match the reference": the masked
// part is exactly 0 and never read (NaN/inf there change nothing, in forward and backward: the
// backward decision of the ref.cpp contract), non-finite kept scores, shift invariance far beyond
// exp's range, the in-place backward, one-element rows, empty tensors, and argument errors through
// the C++ API and `opforge op`. Seeded inputs (seed printed); outputs poisoned before every run.
// Runs the module the loader gives this build (prebuilt, or JIT-compiled in mode=jit), through
// the ABI.
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

constexpr uint64_t kSeed = 20241201;
constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

enum class Bad { none, y_shape, y_dtype, not_square, four_d, strided };

// One [b, s, s] problem in f32 (stored in `dtype` for the call); outputs read back as f32.
struct Causal {
  int64_t b, s;
  DType dtype = DType::f32;
  std::vector<float> x, y, dy;
  Causal(int64_t b_, int64_t s_) : b(b_), s(s_), x(size_t(b_ * s_ * s_)), y(x.size(), kPoison), dy(x.size()) {
    std::mt19937_64 rng(kSeed);
    std::uniform_real_distribution<float> u(-40.0f, 40.0f), ud(-1.0f, 1.0f);
    for (float& v : x) v = u(rng);
    for (float& v : dy) v = ud(rng);
  }
  float& at(std::vector<float>& t, int64_t bi, int64_t i, int64_t j) { return t[size_t((bi * s + i) * s + j)]; }

  static const opf::OpInfo& op() { return *opf::find_op("causal_softmax"); }
  static const opf_module_info* module() { return opf::Loader::instance().load(op(), "cpu").info; }

  std::vector<std::byte> store(const std::vector<float>& v) const {
    std::vector<std::byte> bytes(v.size() * opf::dtype_size(dtype));
    for (size_t i = 0; i < v.size(); ++i) opf::store_element(dtype, bytes.data(), int64_t(i), v[i]);
    return bytes;
  }
  void load(std::vector<float>& v, const std::vector<std::byte>& bytes) const {
    for (size_t i = 0; i < v.size(); ++i) v[i] = float(opf::load_element(dtype, bytes.data(), int64_t(i)));
  }

  // forward: x -> y; backward: (dy, y) -> dy. Returns 0, or 1 with the error in *err.
  int run(const char* entry, double scale, std::string* err = nullptr, Bad bad = Bad::none, int threads = 0) {
    const bool fwd = std::string(entry) == "forward";
    std::vector<std::byte> xs = store(fwd ? x : dy), ys = store(y);
    ys.resize(ys.size() + size_t(b * s) * opf::dtype_size(dtype));  // room for Bad::y_shape's bigger shape
    std::vector<double> y64(y.size());
    int rc = 0;
    try {
      opf::CallBuilder call(op(), entry);
      call.param("scale", scale).threads(threads);
      const opf::Shape shape{b, s, s};
      const char* lead = fwd ? "x" : "dy";
      if (bad == Bad::not_square) call.add(lead, xs.data(), dtype, {b, s + 1, s - 1});
      else if (bad == Bad::four_d) call.add(lead, xs.data(), dtype, {b, 1, s, s});
      else if (bad == Bad::strided) call.add(lead, xs.data(), dtype, {b, s - 1, s - 1}, {s * s, s, 1});
      else call.add(lead, xs.data(), dtype, shape);
      if (bad == Bad::y_shape) call.add("y", ys.data(), dtype, {b, s, s + 1});
      else if (bad == Bad::y_dtype) call.add("y", y64.data(), DType::f64, shape);
      else call.add("y", ys.data(), dtype, shape);
      call.run(module());
    } catch (const opf::Error& e) {
      if (err) *err = e.what();
      rc = 1;
    }
    load(fwd ? y : dy, fwd ? ys : xs);
    return rc;
  }
};

// float64 causal softmax of one row's kept part [0, keep)
std::vector<double> softmax_row(const float* x, int64_t keep, double scale) {
  std::vector<double> z(static_cast<size_t>(keep));
  double mx = -INFINITY, sum = 0;
  for (int64_t k = 0; k < keep; ++k) mx = std::max(mx, z[size_t(k)] = scale * x[k]);
  for (double& v : z) sum += (v = std::exp(v - mx));
  for (double& v : z) v /= sum;
  return z;
}

void expect_one_line(const std::string& err) { EXPECT_EQ(err.find('\n'), std::string::npos) << err; }

// The future keys (j > i) hold NaN, inf and huge values: the outputs there are exactly 0 and the
// kept part is the softmax of the kept scores alone.
TEST(CausalSoftmaxEdge, MaskedPartIsZeroAndNeverRead) {
  std::printf("seed %llu\n", (unsigned long long)kSeed);
  Causal c(2, 37);
  const float junk[] = {std::nanf(""), kInf, -kInf, 3e38f};
  for (int64_t bi = 0; bi < c.b; ++bi)
    for (int64_t i = 0; i < c.s; ++i)
      for (int64_t j = i + 1; j < c.s; ++j) c.at(c.x, bi, i, j) = junk[(i + j) % 4];
  ASSERT_EQ(c.run("forward", 0.125), 0);
  for (int64_t bi = 0; bi < c.b; ++bi)
    for (int64_t i = 0; i < c.s; ++i) {
      const std::vector<double> want = softmax_row(&c.at(c.x, bi, i, 0), i + 1, 0.125);
      for (int64_t j = 0; j < c.s; ++j) {
        const float got = c.at(c.y, bi, i, j);
        if (j > i) {
          EXPECT_EQ(got, 0.0f) << "batch " << bi << " row " << i << " col " << j;
          EXPECT_FALSE(std::signbit(got)) << "row " << i << " col " << j;
        } else {
          EXPECT_NEAR(got, want[size_t(j)], 2e-7 + 4e-7 * want[size_t(j)]) << "row " << i << " col " << j;
        }
      }
    }
  for (int64_t bi = 0; bi < c.b; ++bi) EXPECT_EQ(c.at(c.y, bi, 0, 0), 1.0f) << "row 0 keeps one column";
}

// A NaN or +inf kept score, or a row whose kept scores are all -inf, makes the kept part NaN; the
// masked part stays 0 and other rows are untouched. A -inf beside finite scores is a 0 weight.
TEST(CausalSoftmaxEdge, NonFiniteKeptScoresStayInTheirRow) {
  Causal c(1, 40);
  c.at(c.x, 0, 0, 0) = -kInf;          // row 0: all (one) kept scores -inf
  c.at(c.x, 0, 5, 3) = std::nanf("");  // row 5: NaN
  c.at(c.x, 0, 20, 20) = kInf;         // row 20: +inf on the diagonal
  c.at(c.x, 0, 33, 7) = -kInf;         // row 33: one -inf among finite scores
  c.at(c.x, 0, 34, 17) = 1e30f;        // row 34: huge but finite: all the mass
  ASSERT_EQ(c.run("forward", 0.125), 0);
  for (int64_t i = 0; i < c.s; ++i)
    for (int64_t j = 0; j < c.s; ++j) {
      const float got = c.at(c.y, 0, i, j);
      if (j > i) {
        EXPECT_EQ(got, 0.0f) << "row " << i << " col " << j;
      } else if (i == 0 || i == 5 || i == 20) {
        EXPECT_TRUE(std::isnan(got)) << "row " << i << " col " << j << ": " << got;
      } else if (i == 34) {
        EXPECT_EQ(got, j == 17 ? 1.0f : 0.0f) << "col " << j;
      } else {
        const double want = softmax_row(&c.at(c.x, 0, i, 0), i + 1, 0.125)[size_t(j)];
        EXPECT_NEAR(got, want, 2e-7 + 4e-7 * want) << "row " << i << " col " << j;
        if (i == 33 && j == 7) {
          EXPECT_EQ(got, 0.0f);
        }
      }
    }
}

// Softmax is shift invariant; a shift far beyond exp's range must neither overflow nor change y.
// Scores are multiples of 1/64, so x + 80000 and the scaled differences are exact in f32: the two
// runs see identical z - max and must agree bit for bit.
TEST(CausalSoftmaxEdge, ShiftInvariantFarBeyondExpRange) {
  Causal a(2, 70), b(2, 70);
  for (size_t i = 0; i < a.x.size(); ++i) {
    a.x[i] = std::round(a.x[i] * 64.0f) / 64.0f;
    b.x[i] = a.x[i] + 80000.0f;
  }
  ASSERT_EQ(a.run("forward", 0.125), 0);
  ASSERT_EQ(b.run("forward", 0.125), 0);
  EXPECT_EQ(std::memcmp(a.y.data(), b.y.data(), a.y.size() * sizeof(float)), 0);
}

// The backward overwrites dy with dx and leaves y alone. dy above the diagonal (outputs that are
// the constant 0) holds inf and NaN: apex's whole-row sum would make those rows NaN; here they do
// not reach dx, whose masked part is exactly 0.
TEST(CausalSoftmaxEdge, BackwardIgnoresGradientsOfMaskedOutputs) {
  Causal c(2, 45);
  ASSERT_EQ(c.run("forward", 0.5), 0);
  const float junk[] = {kInf, std::nanf(""), -kInf, 7.0f};
  for (int64_t bi = 0; bi < c.b; ++bi)
    for (int64_t i = 0; i < c.s; ++i)
      for (int64_t j = i + 1; j < c.s; ++j) c.at(c.dy, bi, i, j) = junk[(i * 3 + j) % 4];
  const std::vector<float> y0 = c.y, dy0 = c.dy;
  ASSERT_EQ(c.run("backward", 0.5), 0);
  EXPECT_EQ(std::memcmp(y0.data(), c.y.data(), y0.size() * sizeof(float)), 0) << "y was modified";
  for (int64_t bi = 0; bi < c.b; ++bi)
    for (int64_t i = 0; i < c.s; ++i) {
      const size_t row = size_t((bi * c.s + i) * c.s);
      double dot = 0;
      for (int64_t k = 0; k <= i; ++k) dot += double(dy0[row + size_t(k)]) * y0[row + size_t(k)];
      for (int64_t j = 0; j < c.s; ++j) {
        const float got = c.at(c.dy, bi, i, j);
        if (j > i) {
          EXPECT_EQ(got, 0.0f) << "batch " << bi << " row " << i << " col " << j;
          continue;
        }
        const double want = 0.5 * y0[row + size_t(j)] * (dy0[row + size_t(j)] - dot);
        EXPECT_NEAR(got, want, 1e-6) << "batch " << bi << " row " << i << " col " << j;
      }
    }
  // row 0: y = 1, so dx = scale * (dy - dy) = 0 exactly
  for (int64_t bi = 0; bi < c.b; ++bi) EXPECT_EQ(c.at(c.dy, bi, 0, 0), 0.0f);
}

// One element: y = 1 and dx = 0 exactly, in every storage dtype.
TEST(CausalSoftmaxEdge, OneElement) {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string(opf::dtype_name(t)));
    Causal c(3, 1);
    c.dtype = t;
    ASSERT_EQ(c.run("forward", 0.3), 0);
    for (float v : c.y) EXPECT_EQ(v, 1.0f);
    ASSERT_EQ(c.run("backward", 0.3), 0);
    for (float v : c.dy) EXPECT_EQ(v, 0.0f);
  }
}

// f16/bf16 storage changes only the loads and the final rounding: y equals the f32 kernel's
// result on the stored inputs, rounded once (within one storage ulp: the f32 result itself is
// within a few f32 ulps of the true value, which may straddle a rounding boundary).
TEST(CausalSoftmaxEdge, StorageDtypesChangeOnlyLoadsAndStores) {
  for (DType t : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string(opf::dtype_name(t)));
    Causal h(1, 50), f(1, 50);
    h.dtype = t;
    for (size_t i = 0; i < h.x.size(); ++i) {
      std::byte b[8];  // store_element's widest dtype
      opf::store_element(t, b, 0, h.x[i]);
      f.x[i] = h.x[i] = float(opf::load_element(t, b, 0));
    }
    ASSERT_EQ(h.run("forward", 0.125), 0);
    ASSERT_EQ(f.run("forward", 0.125), 0);
    const double ulp = t == DType::f16 ? 0x1p-10 : 0x1p-7;
    for (size_t i = 0; i < h.y.size(); ++i) EXPECT_NEAR(h.y[i], f.y[i], ulp * f.y[i] + 0x1p-24) << i;
  }
}

TEST(CausalSoftmaxEdge, EmptyTensorsAreANoOp) {
  for (auto [b, s] : {std::pair<int64_t, int64_t>{0, 5}, {3, 0}}) {
    Causal c(b, s);
    EXPECT_EQ(c.run("forward", 0.125), 0) << b << "x" << s;
    EXPECT_EQ(c.run("backward", 0.125), 0) << b << "x" << s;
  }
}

TEST(CausalSoftmaxEdge, BadArgumentsFailWithAOneLineReasonAndWriteNothing) {
  struct Want {
    const char* entry;
    Bad bad;
    const char* text;
  };
  const Want cases[] = {
      {"forward", Bad::not_square, "argument 0 (x) has sq = 7 and sk = 5; the causal mask needs sq == sk"},
      {"forward", Bad::four_d, "argument 0 (x) must be a 3-D f32/f16/bf16 tensor [attn_batches, sq, sk]"},
      {"forward", Bad::strided, "argument 0 (x) is not contiguous"},
      {"forward", Bad::y_shape, "argument 1 (y) has size 7 in dim 2, expected 6"},
      {"forward", Bad::y_dtype, "argument 1 (y) has dtype f64, expected f32"},
      {"backward", Bad::not_square, "argument 0 (dy) has sq = 7 and sk = 5"},
      {"backward", Bad::y_shape, "argument 1 (y) has size 7 in dim 2, expected 6"},
  };
  for (const Want& w : cases) {
    SCOPED_TRACE(std::string(w.entry) + ": " + w.text);
    Causal c(2, 6);
    const std::vector<float> dy0 = c.dy;
    std::string err;
    EXPECT_NE(c.run(w.entry, 0.125, &err, w.bad), 0);
    EXPECT_NE(err.find(w.text), std::string::npos) << err;
    expect_one_line(err);
    if (std::string(w.entry) == "forward") {
      for (float v : c.y) EXPECT_TRUE(std::isnan(v)) << "y written despite the error";
    } else {
      EXPECT_EQ(std::memcmp(dy0.data(), c.dy.data(), dy0.size() * sizeof(float)), 0) << "dy written despite the error";
    }
  }
  // a param outside its range is refused by name before the module runs
  Causal c(1, 4);
  std::string err;
  EXPECT_NE(c.run("forward", 0.0, &err), 0);
  EXPECT_NE(err.find("scale"), std::string::npos) << err;
  for (float v : c.y) EXPECT_TRUE(std::isnan(v));
  // an entry the manifest does not have, straight at the module
  opf_call raw{"sideways", nullptr, 0, nullptr, 0, nullptr, nullptr};
  char msg[256] = "";
  EXPECT_NE(Causal::module()->run(Causal::module(), &raw, msg, sizeof msg), 0);
  EXPECT_NE(std::string(msg).find("unknown entry 'sideways'"), std::string::npos) << msg;
}

// ---------------------------------------------------------------- opforge op
TEST(CausalSoftmaxCli, BadInputsExit2WithOneLineAndWriteNothing) {
  OPF_REQUIRE_OPFORGE_EXE();
  TempDir t, io;
  const std::string D = t.path;
  Causal c(2, 6);
  write_npy(D + "/x.npy", "<f4", {2, 6, 6}, c.x.data(), c.x.size() * 4);
  write_npy(D + "/x_rect.npy", "<f4", {2, 6, 5}, c.x.data(), size_t(60) * 4);
  write_npy(D + "/x_4d.npy", "<f4", {1, 2, 6, 6}, c.x.data(), c.x.size() * 4);
  std::vector<double> x64(c.x.begin(), c.x.end());
  write_npy(D + "/x64.npy", "<f8", {2, 6, 6}, x64.data(), x64.size() * 8);
  write_npy(D + "/y_small.npy", "<f4", {2, 5, 5}, c.x.data(), size_t(50) * 4);
  const std::vector<BadCase> cases = {
      {"not square", {"--in", "x=" + D + "/x_rect.npy"}, "(x) has sq = 6 and sk = 5"},
      {"4-D x", {"--in", "x=" + D + "/x_4d.npy"}, "'x' has 4 dims"},
      {"f64 x", {"--in", "x=" + D + "/x64.npy"}, "f64"},
      {"scale 0", {"--in", "x=" + D + "/x.npy", "--param", "scale=0"}, "'scale'"},
      {"missing x", {"--entry", "forward"}, "'x'"},
      {"backward y shape",
       {"--entry", "backward", "--in", "dy=" + D + "/x.npy", "--in", "y=" + D + "/y_small.npy"},
       "y"},
  };
  const std::string out = D + "/out";
  expect_refused("causal_softmax", cases, D, {"--out", out});
  // and the good call writes y
  const Result ok = opforge_op("causal_softmax", io.path, {"--in", "x=" + D + "/x.npy", "--out", out});
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_TRUE(fs::exists(out + "/y.npy"));
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
