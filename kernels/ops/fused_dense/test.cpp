// fused_dense — edge cases the registry sweep cannot state as "match the reference": a NaN reaches
// exactly the rows / columns its GEMMs and epilogues take it to; GELU and GELU' far outside the
// usual range stay finite (no inf·0 in the saturated sigmoid); bias gradients and outputs have the
// same bits for any thread count on a shape of many odd tiles; empty batch and empty K (empty
// sums are 0, y = bias); argument errors through the C++ API and `opforge op` are one line and
// write nothing. Seeded inputs (seed printed); outputs poisoned before every run. Runs the module
// the loader gives this build (prebuilt, or JIT-compiled in mode=jit), through the ABI.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
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

constexpr uint64_t kSeed = 20261201;

const opf::OpInfo& op() { return *opf::find_op("fused_dense"); }
const opf_module_info* module() { return opf::Loader::instance().load(op(), "cpu").info; }

// One call's tensors by name as f32 values (stored in `dtype` for the call).
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> v;
};
using Tensors = std::map<std::string, Tensor>;

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// The entry's tensors for [b, in, hid, out], inputs drawn from rng (never 0), outputs empty.
Tensors problem(const std::string& entry, int64_t b, int64_t in, int64_t hid, int64_t out, std::mt19937_64& rng) {
  std::map<std::string, std::vector<int64_t>> shapes = {
      {"x", {b, in}},          {"weight", {hid, in}},   {"bias", {hid}},          {"weight1", {hid, in}},
      {"bias1", {hid}},        {"weight2", {out, hid}}, {"bias2", {out}},         {"a", {b, hid}},
      {"h", {b, hid}},         {"dx", {b, in}},         {"dweight", {hid, in}},   {"dbias", {hid}},
      {"dweight1", {hid, in}}, {"dbias1", {hid}},       {"dweight2", {out, hid}}, {"dbias2", {out}}};
  const bool lb = entry.rfind("linear_bias", 0) == 0;
  shapes["y"] = {b, lb ? hid : out};
  shapes["dy"] = {b, lb ? hid : out};
  std::uniform_real_distribution<float> u(0.05f, 1.0f);
  Tensors t;
  for (const opf::ArgInfo& a : op().find_entry(entry)->args) {
    Tensor& x = t[a.name];
    x.shape = shapes.at(a.name);
    if (a.role == opf::Role::in) {
      x.v.resize(size_t(numel(x.shape)));
      for (float& e : x.v) e = (rng() & 1 ? 1.0f : -1.0f) * u(rng);
    }
  }
  return t;
}

enum class Bad { none, dtype, shape };

// Runs the entry on t (outputs poisoned with NaN first, read back into t); 0, or 1 with *err.
int run(const std::string& entry, Tensors& t, DType dtype = DType::f32, int threads = 0, std::string* err = nullptr,
        const std::string& bad_arg = "", Bad bad = Bad::none) {
  const auto& args = op().find_entry(entry)->args;
  std::vector<std::vector<std::byte>> store(args.size());
  int rc = 0;
  try {
    opf::CallBuilder call(op(), entry);
    call.threads(threads);
    for (size_t i = 0; i < args.size(); ++i) {
      Tensor& x = t.at(args[i].name);
      const size_t n = size_t(numel(x.shape));
      std::vector<int64_t> shape = x.shape;
      DType dt = dtype;
      if (args[i].name == bad_arg && bad == Bad::shape) shape[0] += 1;
      if (args[i].name == bad_arg && bad == Bad::dtype) dt = DType::f64;
      store[i].resize((n + 64) * opf::dtype_size(DType::f64));  // room for the bad shape / dtype
      for (size_t k = 0; k < n; ++k)
        opf::store_element(dt, store[i].data(), int64_t(k),
                           args[i].role == opf::Role::in ? double(x.v[k]) : std::numeric_limits<double>::quiet_NaN());
      call.add(args[i].name, store[i].data(), dt, shape);
    }
    call.run(module());
  } catch (const opf::Error& e) {
    if (err) *err = e.what();
    rc = 1;
  }
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].role == opf::Role::in) continue;
    Tensor& x = t.at(args[i].name);
    x.v.resize(size_t(numel(x.shape)));
    for (size_t k = 0; k < x.v.size(); ++k) x.v[k] = float(opf::load_element(dtype, store[i].data(), int64_t(k)));
  }
  return rc;
}

double gelu(double h) { return 0.5 * h * (1 + std::tanh(0.7978845608028654 * (h + 0.044715 * h * h * h))); }
double dgelu(double h) {
  const double t = std::tanh(0.7978845608028654 * (h + 0.044715 * h * h * h));
  return 0.5 * (1 + t) + 0.5 * h * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * h * h);
}

// The (row, col) elements of a [rows, cols] output that are NaN must be exactly `want`.
void expect_nans(const char* name, const Tensor& t, const std::function<bool(int64_t, int64_t)>& want) {
  const int64_t cols = t.shape.size() == 2 ? t.shape[1] : t.shape[0], rows = t.shape.size() == 2 ? t.shape[0] : 1;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      EXPECT_EQ(std::isnan(t.v[size_t(r * cols + c)]), want(r, c)) << name << "[" << r << ", " << c << "]";
}

TEST(FusedDenseEdge, NanReachesExactlyWhatItsFormulaTouches) {
  std::printf("seed %llu\n", (unsigned long long)kSeed);
  std::mt19937_64 rng(kSeed);
  {  // x[2, 3] -> y's row 2
    Tensors t = problem("linear_bias_forward", 6, 7, 9, 1, rng);
    t["x"].v[2 * 7 + 3] = NAN;
    ASSERT_EQ(run("linear_bias_forward", t), 0);
    expect_nans("y", t["y"], [](int64_t r, int64_t) { return r == 2; });
  }
  {  // dy[4, 1] -> dx's row 4, dweight's row 1, dbias[1]
    Tensors t = problem("linear_bias_backward", 6, 7, 9, 1, rng);
    t["dy"].v[4 * 9 + 1] = NAN;
    ASSERT_EQ(run("linear_bias_backward", t), 0);
    expect_nans("dx", t["dx"], [](int64_t r, int64_t) { return r == 4; });
    expect_nans("dweight", t["dweight"], [](int64_t r, int64_t) { return r == 1; });
    expect_nans("dbias", t["dbias"], [](int64_t, int64_t c) { return c == 1; });
  }
  {  // x[1, 0] -> h, a and y's row 1
    Tensors t = problem("linear_gelu_linear_forward", 5, 4, 8, 3, rng);
    t["x"].v[1 * 4 + 0] = NAN;
    ASSERT_EQ(run("linear_gelu_linear_forward", t), 0);
    for (const char* o : {"h", "a", "y"}) expect_nans(o, t[o], [](int64_t r, int64_t) { return r == 1; });
  }
  {  // h[3, 2] -> dH[3, 2] -> dx's row 3, dweight1's row 2, dbias1[2]; dweight2 and dbias2 untouched
    Tensors t = problem("linear_gelu_linear_backward", 5, 4, 8, 3, rng);
    t["h"].v[3 * 8 + 2] = NAN;
    ASSERT_EQ(run("linear_gelu_linear_backward", t), 0);
    expect_nans("dx", t["dx"], [](int64_t r, int64_t) { return r == 3; });
    expect_nans("dweight1", t["dweight1"], [](int64_t r, int64_t) { return r == 2; });
    expect_nans("dbias1", t["dbias1"], [](int64_t, int64_t c) { return c == 2; });
    expect_nans("dweight2", t["dweight2"], [](int64_t, int64_t) { return false; });
    expect_nans("dbias2", t["dbias2"], [](int64_t, int64_t) { return false; });
  }
}

// h far beyond GELU's curved part (up to f32's largest): a = h or 0 and GELU' = 1 or 0, finite,
// where a plain h³ would overflow and meet s (1 - s) = 0 as inf·0. With in = 1, weight1 = 1,
// bias1 = 0, h is x exactly; with one row, dbias1 is dH itself.
TEST(FusedDenseEdge, GeluSaturatesWithoutNan) {
  const std::vector<float> hs = {-3.0e38f, -1e30f, -1e5f, -20.0f, -3.0f, -0.7517916f, -0.25f,
                                 0.3f,     1.5f,   9.0f,  1e5f,   1e30f, 3.0e38f};
  const int64_t n = int64_t(hs.size());
  std::mt19937_64 rng(kSeed + 1);
  Tensors f = problem("linear_gelu_linear_forward", n, 1, 1, 1, rng);
  f["x"].v = hs;
  f["weight1"].v = {1.0f};
  f["bias1"].v = {0.0f};
  ASSERT_EQ(run("linear_gelu_linear_forward", f), 0);
  for (int64_t i = 0; i < n; ++i) {
    SCOPED_TRACE("h = " + std::to_string(hs[size_t(i)]));
    EXPECT_EQ(f["h"].v[size_t(i)], hs[size_t(i)]);
    const double want = gelu(hs[size_t(i)]);
    EXPECT_TRUE(std::isfinite(f["a"].v[size_t(i)]));
    EXPECT_NEAR(f["a"].v[size_t(i)], want, 4e-7 * std::fabs(hs[size_t(i)]) + 1e-30);
  }
  Tensors g = problem("linear_gelu_linear_backward", 1, 1, n, 1, rng);
  g["h"].v = hs;
  ASSERT_EQ(run("linear_gelu_linear_backward", g), 0);
  for (int64_t j = 0; j < n; ++j) {
    SCOPED_TRACE("h = " + std::to_string(hs[size_t(j)]));
    const double da = double(g["dy"].v[0]) * g["weight2"].v[size_t(j)];
    const float got = g["dbias1"].v[size_t(j)];
    ASSERT_TRUE(std::isfinite(got));
    EXPECT_NEAR(got, da * dgelu(hs[size_t(j)]), 1e-6 * std::fabs(da));
    if (std::fabs(hs[size_t(j)]) >= 20) {
      EXPECT_EQ(got, hs[size_t(j)] > 0 ? float(da) : 0.0f);
    }
  }
}

// Many tiles of odd sizes in every GEMM (rows and columns both split), every output: the same
// bits at 1, 2, 3 and 7 threads, in f32 and bf16.
TEST(FusedDenseEdge, SameBitsForAnyThreadCount) {
  for (DType dt : {DType::f32, DType::bf16})
    for (const char* entry :
         {"linear_bias_forward", "linear_bias_backward", "linear_gelu_linear_forward", "linear_gelu_linear_backward"}) {
      SCOPED_TRACE(std::string(entry) + " " + std::string(opf::dtype_name(dt)));
      std::mt19937_64 rng(kSeed + 2);
      Tensors one = problem(entry, 301, 37, 263, 29, rng);
      ASSERT_EQ(run(entry, one, dt, 1), 0);
      for (int threads : {2, 3, 7}) {
        Tensors t = one;
        ASSERT_EQ(run(entry, t, dt, threads), 0);
        for (const auto& [name, x] : one)
          EXPECT_EQ(std::memcmp(x.v.data(), t.at(name).v.data(), x.v.size() * 4), 0)
              << name << ", " << threads << " threads";
      }
    }
}

TEST(FusedDenseEdge, EmptyBatchAndEmptyK) {
  std::mt19937_64 rng(kSeed + 3);
  {  // no rows: the weight and bias gradients are empty sums
    Tensors t = problem("linear_bias_backward", 0, 5, 6, 1, rng);
    ASSERT_EQ(run("linear_bias_backward", t), 0);
    for (const char* o : {"dweight", "dbias"})
      for (float v : t[o].v) EXPECT_EQ(v, 0.0f) << o;
    Tensors g = problem("linear_gelu_linear_backward", 0, 5, 6, 3, rng);
    ASSERT_EQ(run("linear_gelu_linear_backward", g), 0);
    for (const char* o : {"dweight1", "dbias1", "dweight2", "dbias2"})
      for (float v : g[o].v) EXPECT_EQ(v, 0.0f) << o;
    Tensors f = problem("linear_gelu_linear_forward", 0, 5, 6, 3, rng);
    EXPECT_EQ(run("linear_gelu_linear_forward", f), 0);
  }
  {  // in = 0: y = bias in every row; dweight [hid, 0] and dx [b, 0] are empty
    Tensors t = problem("linear_bias_forward", 4, 0, 6, 1, rng);
    ASSERT_EQ(run("linear_bias_forward", t), 0);
    for (int64_t r = 0; r < 4; ++r)
      for (int64_t j = 0; j < 6; ++j) EXPECT_EQ(t["y"].v[size_t(r * 6 + j)], t["bias"].v[size_t(j)]);
    Tensors b = problem("linear_bias_backward", 4, 0, 6, 1, rng);
    ASSERT_EQ(run("linear_bias_backward", b), 0);
    for (int64_t j = 0; j < 6; ++j) {
      double s = 0;
      for (int64_t r = 0; r < 4; ++r) s += b["dy"].v[size_t(r * 6 + j)];
      EXPECT_NEAR(b["dbias"].v[size_t(j)], s, 1e-6);
    }
  }
}

void expect_one_line(const std::string& err) { EXPECT_EQ(err.find('\n'), std::string::npos) << err; }

TEST(FusedDenseEdge, BadArgumentsFailWithAOneLineReasonAndWriteNothing) {
  struct Want {
    const char* entry;
    const char* arg;
    Bad bad;
    const char* text;
  };
  const Want cases[] = {
      {"linear_bias_forward", "weight", Bad::shape,
       "linear_bias_forward: argument 2 (bias) has size 6 in dim 0, expected 7"},
      {"linear_bias_forward", "bias", Bad::dtype, "linear_bias_forward: argument 2 (bias) has dtype f64, expected f32"},
      {"linear_bias_forward", "y", Bad::shape, "linear_bias_forward: argument 3 (y) has size 5 in dim 0, expected 4"},
      {"linear_bias_backward", "x", Bad::shape, "linear_bias_backward: argument 1 (x) has size 5 in dim 0, expected 4"},
      {"linear_bias_backward", "dbias", Bad::dtype,
       "linear_bias_backward: argument 5 (dbias) has dtype f64, expected f32"},
      {"linear_gelu_linear_forward", "bias2", Bad::shape,
       "linear_gelu_linear_forward: argument 4 (bias2) has size 4 in dim 0, expected 3"},
      {"linear_gelu_linear_forward", "h", Bad::dtype,
       "linear_gelu_linear_forward: argument 7 (h) has dtype f64, expected f32"},
      {"linear_gelu_linear_backward", "a", Bad::shape,
       "linear_gelu_linear_backward: argument 3 (a) has size 5 in dim 0, expected 4"},
      {"linear_gelu_linear_backward", "weight2", Bad::shape,
       "linear_gelu_linear_backward: argument 5 (weight2) has size 4 in dim 0, expected 3"},
      {"linear_gelu_linear_backward", "dbias1", Bad::dtype,
       "linear_gelu_linear_backward: argument 8 (dbias1) has dtype f64, expected f32"},
  };
  for (const Want& w : cases) {
    SCOPED_TRACE(w.text);
    std::mt19937_64 rng(kSeed + 4);
    Tensors t = problem(w.entry, 4, 5, 6, 3, rng);
    std::string err;
    EXPECT_NE(run(w.entry, t, DType::f32, 0, &err, w.arg, w.bad), 0);
    EXPECT_NE(err.find(w.text), std::string::npos) << err;
    expect_one_line(err);
    for (const opf::ArgInfo& a : op().find_entry(w.entry)->args)
      if (a.role == opf::Role::out && a.name != w.arg) {
        for (float v : t[a.name].v) EXPECT_TRUE(std::isnan(v)) << a.name << " written despite the error";
      }
  }
  opf_call raw{"sideways", nullptr, 0, nullptr, 0, nullptr, nullptr};
  char msg[256] = "";
  EXPECT_NE(module()->run(module(), &raw, msg, sizeof msg), 0);
  EXPECT_NE(std::string(msg).find("unknown entry 'sideways'"), std::string::npos) << msg;
}

// ---------------------------------------------------------------- opforge op
TEST(FusedDenseCli, BadInputsExit2WithOneLineAndWriteNothing) {
  OPF_REQUIRE_OPFORGE_EXE();
  TempDir t, io;
  const std::string D = t.path;
  std::mt19937_64 rng(kSeed + 5);
  Tensors p = problem("linear_bias_forward", 4, 5, 6, 1, rng);
  write_npy(D + "/x.npy", {4, 5}, p["x"].v);
  write_npy(D + "/w.npy", {6, 5}, p["weight"].v);
  write_npy(D + "/w_in.npy", {6, 4}, p["weight"].v);
  write_npy(D + "/bias.npy", {6}, p["bias"].v);
  write_npy(D + "/bias5.npy", {5}, p["bias"].v);
  const std::vector<std::string> fwd = {"--entry", "linear_bias_forward", "--in", "x=" + D + "/x.npy"};
  const std::vector<BadCase> cases = {
      {"weight's in", cat({fwd, {"--in", "weight=" + D + "/w_in.npy", "--in", "bias=" + D + "/bias.npy"}}), "'weight'"},
      {"bias length", cat({fwd, {"--in", "weight=" + D + "/w.npy", "--in", "bias=" + D + "/bias5.npy"}}), "'bias'"},
      {"missing bias", cat({fwd, {"--in", "weight=" + D + "/w.npy"}}), "'bias'"},
  };
  const std::string out = D + "/out";
  expect_refused("fused_dense", cases, D, {"--out", out});
  // the good call infers y [batch, hidden] from the inputs
  const Result ok =
      opforge_op("fused_dense", io.path,
                 cat({fwd, {"--in", "weight=" + D + "/w.npy", "--in", "bias=" + D + "/bias.npy", "--out", out}}));
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_TRUE(fs::exists(out + "/y.npy"));
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
