// bias_swiglu — edge cases the registry sweep cannot state as "match the reference": NaN stays
// in the elements and dbias columns its formula reaches, saturated sigmoids (|a| far beyond exp's
// range) stay finite, dbias of one row is that row's dx bit for bit, dbias has the same bits for
// any thread count, empty tensors (an empty sum is 0), and argument errors through the C++ API
// and `opforge op`. Seeded inputs (seed printed); outputs poisoned before every run. Runs the
// module the loader gives this build (prebuilt, or JIT-compiled in mode=jit), through the ABI.
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

constexpr uint64_t kSeed = 20241202;
constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();

enum class Bad { none, odd_x, bias_len, y_shape, dx_dtype, dbias_shape, x_rows };

// One [N, H] problem as f32 values (stored in `dtype` for the call); outputs read back as f32.
struct Swiglu {
  int64_t N, H;
  DType dtype = DType::f32;
  std::vector<float> x, bias, dy, y, dx, dbias;
  Swiglu(int64_t n, int64_t h) : N(n), H(h), x(size_t(2 * n * h)), bias(size_t(2 * h)), dy(size_t(n * h)) {
    std::mt19937_64 rng(kSeed);
    std::uniform_real_distribution<float> ux(-2.0f, 2.0f), ub(-0.5f, 0.5f), ug(-1.0f, 1.0f);
    for (float& v : x) v = ux(rng);
    for (float& v : bias) v = ub(rng);
    for (float& v : dy) v = ug(rng);
  }
  float& xa(int64_t r, int64_t j) { return x[size_t(r * 2 * H + j)]; }
  float& xc(int64_t r, int64_t j) { return x[size_t(r * 2 * H + H + j)]; }

  static const opf::OpInfo& op() { return *opf::find_op("bias_swiglu"); }
  static const opf_module_info* module() { return opf::Loader::instance().load(op(), "cpu").info; }

  size_t slack() const { return size_t(2 * H + N + 2); }  // room for the bad shapes below
  std::vector<std::byte> store(const std::vector<float>& v, size_t extra = 0) const {
    std::vector<std::byte> b((v.size() + extra) * opf::dtype_size(dtype));
    for (size_t i = 0; i < v.size(); ++i) opf::store_element(dtype, b.data(), int64_t(i), v[i]);
    return b;
  }
  std::vector<std::byte> poisoned(size_t n) const { return store(std::vector<float>(n, kPoison), slack()); }
  void load(std::vector<float>& v, const std::vector<std::byte>& b, size_t n) const {
    v.resize(n);
    for (size_t i = 0; i < n; ++i) v[i] = float(opf::load_element(dtype, b.data(), int64_t(i)));
  }

  int forward(std::string* err = nullptr, Bad bad = Bad::none) {
    std::vector<std::byte> xs = store(x, slack()), bs = store(bias, slack()), ys = poisoned(size_t(N * H));
    int rc = 0;
    try {
      opf::CallBuilder call(op(), "forward");
      call.add("x", xs.data(), dtype, {N, bad == Bad::odd_x ? 2 * H + 1 : 2 * H});
      call.add("bias", bs.data(), dtype, {bad == Bad::bias_len ? 2 * H + 2 : 2 * H});
      call.add("y", ys.data(), dtype, {N, bad == Bad::y_shape ? H + 1 : H});
      call.run(module());
    } catch (const opf::Error& e) {
      if (err) *err = e.what();
      rc = 1;
    }
    load(y, ys, size_t(N * H));
    return rc;
  }

  int backward(std::string* err = nullptr, Bad bad = Bad::none, int threads = 0) {
    std::vector<std::byte> xs = store(x, slack()), bs = store(bias), gs = store(dy);
    std::vector<std::byte> dxs = poisoned(size_t(2 * N * H)), dbs = poisoned(size_t(2 * H));
    std::vector<double> dx64(size_t(2 * N * H));
    int rc = 0;
    try {
      opf::CallBuilder call(op(), "backward");
      call.threads(threads);
      call.add("dy", gs.data(), dtype, {N, H});
      call.add("x", xs.data(), dtype, {bad == Bad::x_rows ? N + 1 : N, 2 * H});
      call.add("bias", bs.data(), dtype, {2 * H});
      if (bad == Bad::dx_dtype) call.add("dx", dx64.data(), DType::f64, {N, 2 * H});
      else call.add("dx", dxs.data(), dtype, {N, 2 * H});
      call.add("dbias", dbs.data(), dtype, {bad == Bad::dbias_shape ? 2 * H - 1 : 2 * H});
      call.run(module());
    } catch (const opf::Error& e) {
      if (err) *err = e.what();
      rc = 1;
    }
    load(dx, dxs, size_t(2 * N * H));
    load(dbias, dbs, size_t(2 * H));
    return rc;
  }
};

// float64 formulas (the stored values are the f32 values here)
struct Ref {
  double y, da, dc;
};
Ref reference(double xa, double xc, double ba, double bc, double g) {
  const double a = xa + ba, c = xc + bc, s = 1 / (1 + std::exp(-a));
  return {a * s * c, g * s * (1 + a * (1 - s)) * c, g * a * s};
}

void expect_one_line(const std::string& err) { EXPECT_EQ(err.find('\n'), std::string::npos) << err; }

// A NaN reaches exactly what its formula reaches: x's a-part -> y, both dx of the element and
// both dbias columns; x's c-part -> y, da (not dc) and dbias[j]; dy -> both dx and both dbias.
TEST(BiasSwigluEdge, NanStaysWhereItsFormulaTakesIt) {
  std::printf("seed %llu\n", (unsigned long long)kSeed);
  Swiglu p(9, 21);
  p.xa(2, 4) = std::nanf("");
  p.xc(5, 17) = std::nanf("");
  p.dy[size_t(7 * p.H + 9)] = std::nanf("");
  ASSERT_EQ(p.forward(), 0);
  ASSERT_EQ(p.backward(), 0);
  for (int64_t r = 0; r < p.N; ++r)
    for (int64_t j = 0; j < p.H; ++j) {
      const bool nan_a = r == 2 && j == 4, nan_c = r == 5 && j == 17, nan_g = r == 7 && j == 9;
      const float y = p.y[size_t(r * p.H + j)], da = p.dx[size_t(r * 2 * p.H + j)],
                  dc = p.dx[size_t(r * 2 * p.H + p.H + j)];
      EXPECT_EQ(std::isnan(y), nan_a || nan_c) << r << "," << j;
      EXPECT_EQ(std::isnan(da), nan_a || nan_c || nan_g) << r << "," << j;
      EXPECT_EQ(std::isnan(dc), nan_a || nan_g) << r << "," << j;
    }
  for (int64_t k = 0; k < 2 * p.H; ++k) {
    const bool nan = k == 4 || k == p.H + 4 || k == 17 || k == 9 || k == p.H + 9;
    EXPECT_EQ(std::isnan(p.dbias[size_t(k)]), nan) << "dbias[" << k << "] = " << p.dbias[size_t(k)];
  }
}

// a far beyond exp's range on either side: silu(a) -> 0 (below; exactly 0 past exp's normal
// range) or a (above), d silu -> 0 or 1, all finite, next to ordinary columns.
TEST(BiasSwigluEdge, SaturatedSigmoidsStayFinite) {
  Swiglu p(3, 19);
  const float big[] = {-1000.0f, -100.0f, -88.5f, 88.5f, 100.0f, 1000.0f};
  for (int64_t r = 0; r < p.N; ++r)
    for (int64_t j = 0; j < 6; ++j) p.xa(r, j * 3) = big[j];
  ASSERT_EQ(p.forward(), 0);
  ASSERT_EQ(p.backward(), 0);
  for (int64_t r = 0; r < p.N; ++r)
    for (int64_t j = 0; j < p.H; ++j) {
      SCOPED_TRACE("row " + std::to_string(r) + " col " + std::to_string(j) + " a " + std::to_string(p.xa(r, j)));
      const Ref want =
          reference(p.xa(r, j), p.xc(r, j), p.bias[size_t(j)], p.bias[size_t(p.H + j)], p.dy[size_t(r * p.H + j)]);
      const float y = p.y[size_t(r * p.H + j)], da = p.dx[size_t(r * 2 * p.H + j)],
                  dc = p.dx[size_t(r * 2 * p.H + p.H + j)];
      ASSERT_TRUE(std::isfinite(y) && std::isfinite(da) && std::isfinite(dc)) << y << " " << da << " " << dc;
      // relative to the terms' size: d silu has a zero near a = -1.28, where a's own rounding in
      // x + bias dominates the relative error of da
      const double c = std::fabs(double(p.xc(r, j)) + p.bias[size_t(p.H + j)]),
                   g = std::fabs(p.dy[size_t(r * p.H + j)]);
      EXPECT_NEAR(y, want.y, 1e-6 * (std::fabs(want.y) + c) + 1e-30);
      EXPECT_NEAR(da, want.da, 1e-6 * (std::fabs(want.da) + g * c) + 1e-30);
      EXPECT_NEAR(dc, want.dc, 1e-6 * std::fabs(want.dc) + 1e-30);
      if (double(p.xa(r, j)) + p.bias[size_t(j)] < -87.5) {  // s(a) = 0 exactly, not a clamped exp's tiny rest
        EXPECT_EQ(y, 0.0f);
        EXPECT_EQ(da, 0.0f);
        EXPECT_EQ(dc, 0.0f);
      }
    }
}

// With one row, dbias is that row's f32 dx rounded once, exactly what dx holds.
TEST(BiasSwigluEdge, OneRowDbiasIsTheRowsDx) {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string(opf::dtype_name(t)));
    Swiglu p(1, 37);
    p.dtype = t;
    ASSERT_EQ(p.backward(), 0);
    for (size_t k = 0; k < p.dbias.size(); ++k) EXPECT_EQ(p.dbias[k], p.dx[k]) << k;
  }
  Swiglu one(1, 1);  // one element
  ASSERT_EQ(one.forward(), 0);
  ASSERT_EQ(one.backward(), 0);
  const Ref want = reference(one.x[0], one.x[1], one.bias[0], one.bias[1], one.dy[0]);
  EXPECT_NEAR(one.y[0], want.y, 1e-6 * std::fabs(want.y));
  EXPECT_EQ(one.dbias[0], one.dx[0]);
  EXPECT_EQ(one.dbias[1], one.dx[1]);
}

// Column sums over many row blocks: the same bits at 1, 2, 3 and 7 threads, and close to the
// float64 sum of the float64 dx.
TEST(BiasSwigluEdge, DbiasBitsDoNotDependOnThreads) {
  Swiglu p(3001, 45);
  ASSERT_EQ(p.backward(nullptr, Bad::none, 1), 0);
  const std::vector<float> dx1 = p.dx, db1 = p.dbias;
  for (int threads : {2, 3, 7}) {
    ASSERT_EQ(p.backward(nullptr, Bad::none, threads), 0);
    EXPECT_EQ(std::memcmp(dx1.data(), p.dx.data(), dx1.size() * 4), 0) << threads << " threads";
    EXPECT_EQ(std::memcmp(db1.data(), p.dbias.data(), db1.size() * 4), 0) << threads << " threads";
  }
  for (int64_t k = 0; k < p.H; ++k) {
    double sa = 0, sc = 0, mag = 0;
    for (int64_t r = 0; r < p.N; ++r) {
      const Ref w =
          reference(p.xa(r, k), p.xc(r, k), p.bias[size_t(k)], p.bias[size_t(p.H + k)], p.dy[size_t(r * p.H + k)]);
      sa += w.da;
      sc += w.dc;
      mag += std::fabs(w.da) + std::fabs(w.dc);
    }
    EXPECT_NEAR(db1[size_t(k)], sa, 1e-6 * mag) << k;
    EXPECT_NEAR(db1[size_t(p.H + k)], sc, 1e-6 * mag) << k;
  }
}

TEST(BiasSwigluEdge, EmptyTensors) {
  Swiglu rows0(0, 5);  // no rows: y and dx are empty, dbias is an empty sum
  EXPECT_EQ(rows0.forward(), 0);
  ASSERT_EQ(rows0.backward(), 0);
  for (float v : rows0.dbias) EXPECT_EQ(v, 0.0f);
  Swiglu cols0(4, 0);
  EXPECT_EQ(cols0.forward(), 0);
  EXPECT_EQ(cols0.backward(), 0);
}

TEST(BiasSwigluEdge, BadArgumentsFailWithAOneLineReasonAndWriteNothing) {
  struct Want {
    bool fwd;
    Bad bad;
    const char* text;
  };
  const Want cases[] = {
      {true, Bad::odd_x, "forward: argument 0 (x) has 13 columns; it must be [N, 2H] (an even count)"},
      {true, Bad::bias_len, "forward: argument 1 (bias) has size 14 in dim 0, expected 12"},
      {true, Bad::y_shape, "forward: argument 2 (y) has size 7 in dim 1, expected 6"},
      {false, Bad::x_rows, "backward: argument 1 (x) has size 6 in dim 0, expected 5"},
      {false, Bad::dx_dtype, "backward: argument 3 (dx) has dtype f64, expected f32"},
      {false, Bad::dbias_shape, "backward: argument 4 (dbias) has size 11 in dim 0, expected 12"},
  };
  for (const Want& w : cases) {
    SCOPED_TRACE(w.text);
    Swiglu p(5, 6);
    std::string err;
    EXPECT_NE(w.fwd ? p.forward(&err, w.bad) : p.backward(&err, w.bad), 0);
    EXPECT_NE(err.find(w.text), std::string::npos) << err;
    expect_one_line(err);
    for (float v : w.fwd ? p.y : p.dx) EXPECT_TRUE(std::isnan(v)) << "output written despite the error";
    if (!w.fwd) {
      for (float v : p.dbias) EXPECT_TRUE(std::isnan(v)) << "dbias written despite the error";
    }
  }
  opf_call raw{"sideways", nullptr, 0, nullptr, 0, nullptr, nullptr};
  char msg[256] = "";
  EXPECT_NE(Swiglu::module()->run(Swiglu::module(), &raw, msg, sizeof msg), 0);
  EXPECT_NE(std::string(msg).find("unknown entry 'sideways'"), std::string::npos) << msg;
}

// ---------------------------------------------------------------- opforge op
TEST(BiasSwigluCli, BadInputsExit2WithOneLineAndWriteNothing) {
  OPF_REQUIRE_OPFORGE_EXE();
  TempDir t, io;
  const std::string D = t.path;
  Swiglu p(4, 6);
  write_npy(D + "/x.npy", {4, 12}, p.x);
  write_npy(D + "/x_odd.npy", {4, 11}, p.x);
  write_npy(D + "/x_rows.npy", {3, 12}, p.x);
  write_npy(D + "/bias.npy", {12}, p.bias);
  write_npy(D + "/bias10.npy", {10}, p.bias);
  write_npy(D + "/dy.npy", {4, 6}, p.dy);
  const std::vector<std::string> x = {"--in", "x=" + D + "/x.npy"}, b = {"--in", "bias=" + D + "/bias.npy"},
                                 bwd = {"--entry", "backward", "--in", "dy=" + D + "/dy.npy"};
  const std::vector<BadCase> cases = {
      {"odd x columns", cat({{"--in", "x=" + D + "/x_odd.npy"}, b}), "'x'"},
      {"bias length", cat({x, {"--in", "bias=" + D + "/bias10.npy"}}), "'bias'"},
      {"missing bias", cat({x}), "'bias'"},
      {"backward x rows", cat({bwd, {"--in", "x=" + D + "/x_rows.npy"}, b}), "'x'"},
      {"backward bias length", cat({bwd, x, {"--in", "bias=" + D + "/bias10.npy"}}), "'bias'"},
  };
  const std::string out = D + "/out";
  expect_refused("bias_swiglu", cases, D, {"--out", out});
  // the good calls infer y [N, H], dx [N, 2H] and dbias [2H] from the inputs
  Result ok = opforge_op("bias_swiglu", io.path, cat({x, b, {"--out", out}}));
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_TRUE(fs::exists(out + "/y.npy"));
  ok = opforge_op("bias_swiglu", io.path, cat({bwd, x, b, {"--out", out + "2"}}));
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_TRUE(fs::exists(out + "2/dx.npy") && fs::exists(out + "2/dbias.npy"));
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
