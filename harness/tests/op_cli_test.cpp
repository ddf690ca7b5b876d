// `opforge op` driven as a subprocess (OPFORGE_EXE, set by meson test): --describe is valid JSON
// matching the manifest; layer_norm forward on random .npy files matches a float64 layer norm
// (f32, and bf16 from f32 files); scaled_masked_softmax backward writes its inout dy; bad inputs
// exit 2 with one line naming the argument and leave the output directory untouched.
//
// Data: splitmix64 from a fixed seed (printed), OPFORGE_SEED=N to draw other data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "matrix/json.h"
#include "npy.h"
#include "opforge/error.h"
#include "opforge/manifest.h"
#include "suites/seed.h"

namespace opf::cli {
namespace {
namespace fs = std::filesystem;
using suites::Rng;

struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/opf-op-cli-test-XXXXXX";
    path = mkdtemp(t);
  }
  ~TempDir() { fs::remove_all(path); }
};

uint64_t seed() {
  static const uint64_t s = [] {
    const char* e = std::getenv("OPFORGE_SEED");
    const uint64_t v = e ? std::strtoull(e, nullptr, 10) : 20240601;
    std::printf("op CLI tests: seed %llu (OPFORGE_SEED=%llu replays it)\n", (unsigned long long)v,
                (unsigned long long)v);
    return v;
  }();
  return s;
}

struct Result {
  int code = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

Result opforge_op(const std::vector<std::string>& args) {
  static TempDir io;
  std::string cmd = std::string(std::getenv("OPFORGE_EXE")) + " op";
  for (const auto& a : args) cmd += " '" + a + "'";  // test paths hold no quotes
  cmd += " > " + io.path + "/stdout 2> " + io.path + "/stderr";
  const int st = std::system(cmd.c_str());
  Result r;
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = slurp(io.path + "/stdout");
  r.err = slurp(io.path + "/stderr");
  return r;
}

#define SKIP_WITHOUT(op)                                                                           \
  if (!std::getenv("OPFORGE_EXE")) GTEST_SKIP() << "OPFORGE_EXE not set (run through meson test)"; \
  if (!find_op(op)) GTEST_SKIP() << op << " is not enabled in this build"

// Values in [lo, hi), never (near) zero: a zero would hide a missing scale or an unwritten output.
std::vector<float> draw(Rng& rng, size_t n, double lo, double hi) {
  std::vector<float> v(n);
  for (auto& x : v) do
      x = float(lo + (hi - lo) * rng.uniform());
    while (std::fabs(x) < 1e-3f);
  return v;
}

std::string write_f32(const std::string& path, const std::vector<int64_t>& shape, const std::vector<float>& v) {
  npy::Array a;
  a.dtype = DType::f32;
  a.shape = shape;
  a.data.resize(v.size() * 4);
  std::memcpy(a.data.data(), v.data(), a.data.size());
  npy::write(path, a);
  return path;
}

std::vector<double> read_values(const std::string& path, DType want, const std::vector<int64_t>& shape) {
  const npy::Array a = npy::read(path);
  EXPECT_EQ(a.dtype, want) << path;
  EXPECT_EQ(a.shape, shape) << path;
  std::vector<double> v(size_t(a.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = load_element(a.dtype, a.data.data(), int64_t(i));
  return v;
}

double round_to(DType d, double v) {
  unsigned char b[8];
  store_element(d, b, 0, v);
  return load_element(d, b, 0);
}

std::set<std::string> listing(const std::string& dir) {
  std::set<std::string> s;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) s.insert(e.path().filename().string());
  return s;
}

// ---------------------------------------------------------------- --describe

TEST(OpCli, DescribeIsTheManifestAsJson) {
  if (!std::getenv("OPFORGE_EXE")) GTEST_SKIP() << "OPFORGE_EXE not set (run through meson test)";
  for (const OpInfo& op : op_table()) {
    SCOPED_TRACE(op.name);
    const Result r = opforge_op({op.name, "--describe"});
    ASSERT_EQ(r.code, 0) << r.err;
    const json::Value d = json::parse(r.out, op.name + " --describe");
    EXPECT_EQ(d.str("op"), op.name);
    EXPECT_EQ(d.str("summary"), op.summary);
    ASSERT_EQ(d.get("dtypes").as_array().size(), op.dtypes.size());
    for (size_t i = 0; i < op.dtypes.size(); ++i) EXPECT_EQ(d.get("dtypes").as_array()[i].as_string(), op.dtypes[i]);
    EXPECT_EQ(d.get("backends").as_array().size(), op.enabled_backends.size());
    const auto& entries = d.get("entries").as_array();
    ASSERT_EQ(entries.size(), op.entries.size());
    for (size_t e = 0; e < entries.size(); ++e) {
      EXPECT_EQ(entries[e].str("name"), op.entries[e].name);
      const auto& args = entries[e].get("args").as_array();
      ASSERT_EQ(args.size(), op.entries[e].args.size());
      for (size_t i = 0; i < args.size(); ++i) {
        const ArgInfo& a = op.entries[e].args[i];
        EXPECT_EQ(args[i].str("name"), a.name);
        EXPECT_EQ(args[i].str("role"), role_name(a.role));
        EXPECT_EQ(args[i].str("dtype"), a.dtype_text());
        EXPECT_EQ(args[i].get("list").as_bool(true), a.list);
        EXPECT_EQ(args[i].get("view").as_bool(true), a.view);
        EXPECT_EQ(args[i].str("shape"), a.shape);
      }
    }
    const auto& params = d.get("params").as_array();
    ASSERT_EQ(params.size(), op.params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      const ParamInfo& p = op.params[i];
      EXPECT_EQ(params[i].str("name"), p.name);
      EXPECT_EQ(params[i].str("type"), param_type_name(p.type));
      EXPECT_EQ(params[i].str("default"), p.format(p.def));
      const json::Value& range = params[i].get("range");
      if (std::isfinite(p.min)) EXPECT_EQ(range.num("min"), p.min);
      else EXPECT_TRUE(range.get("min").is_null());
      if (std::isfinite(p.max)) EXPECT_EQ(range.num("max"), p.max);
      else EXPECT_TRUE(range.get("max").is_null());
      EXPECT_EQ(range.get("min_open").as_bool(!p.min_open), p.min_open);
      EXPECT_EQ(range.get("max_open").as_bool(!p.max_open), p.max_open);
      EXPECT_EQ(params[i].get("choices").as_array().size(), p.choices.size());
      EXPECT_EQ(params[i].str("doc"), p.doc);
    }
  }
}

TEST(OpCli, DescribeLayerNorm) {
  SKIP_WITHOUT("layer_norm");
  const Result r = opforge_op({"layer_norm", "--describe"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json::Value d = json::parse(r.out, "layer_norm --describe");
  const json::Value& fwd = d.get("entries").as_array().at(0);
  EXPECT_EQ(fwd.str("name"), "forward");
  const json::Value& mean = fwd.get("args").as_array().at(4);
  EXPECT_EQ(mean.str("name"), "mean");
  EXPECT_EQ(mean.str("role"), "out");
  EXPECT_EQ(mean.str("dtype"), "acc");
  EXPECT_EQ(mean.str("shape"), "[rows]");
  const json::Value& eps = d.get("params").as_array().at(0);
  EXPECT_EQ(eps.str("name"), "eps");
  EXPECT_EQ(eps.str("default"), "1e-05");
  EXPECT_EQ(eps.get("range").num("min", -1), 0);
  EXPECT_TRUE(eps.get("range").get("min_open").as_bool());
}

// ---------------------------------------------------------------- layer_norm forward vs float64

void layer_norm_round_trip(const std::string& dtype, int64_t rows, int64_t cols) {
  SCOPED_TRACE(dtype + " " + std::to_string(rows) + "x" + std::to_string(cols));
  TempDir t;
  Rng rng(suites::test_seed(seed(), "layer_norm/" + dtype + "/" + std::to_string(rows) + "x" + std::to_string(cols)));
  const auto x = draw(rng, size_t(rows * cols), -3.0, 5.0), g = draw(rng, size_t(cols), 0.5, 1.5),
             b = draw(rng, size_t(cols), -1.0, 1.0);
  write_f32(t.path + "/x.npy", {rows, cols}, x);
  write_f32(t.path + "/gamma.npy", {cols}, g);
  write_f32(t.path + "/beta.npy", {cols}, b);
  std::vector<std::string> args = {"layer_norm",
                                   "--entry",
                                   "forward",
                                   "--in",
                                   "x=" + t.path + "/x.npy",
                                   "--in",
                                   "gamma=" + t.path + "/gamma.npy",
                                   "--in",
                                   "beta=" + t.path + "/beta.npy",
                                   "--out",
                                   t.path + "/out",
                                   "--param",
                                   "eps=1e-5"};
  if (dtype != "f32") args.insert(args.end(), {"--dtype", dtype});
  const Result r = opforge_op(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(listing(t.path + "/out"), (std::set<std::string>{"y.npy", "mean.npy", "rstd.npy"}));

  // the reference sees the inputs as stored: bf16 rounds the f32 files to nearest even
  const DType T = dtype == "bf16" ? DType::bf16 : DType::f32;
  auto stored = [&](float v) { return round_to(T, v); };
  const auto y = read_values(t.path + "/out/y.npy", DType::f32, {rows, cols});  // bf16 comes back as f32
  const auto mean = read_values(t.path + "/out/mean.npy", DType::f32, {rows});
  const auto rstd = read_values(t.path + "/out/rstd.npy", DType::f32, {rows});
  const double y_rel = T == DType::bf16 ? 0x1p-8 : 0.0;  // y is rounded once to T
  int bad = 0;
  for (int64_t i = 0; i < rows && bad < 5; ++i) {
    double m = 0, v = 0;
    for (int64_t j = 0; j < cols; ++j) m += stored(x[size_t(i * cols + j)]);
    m /= double(cols);
    for (int64_t j = 0; j < cols; ++j) v += std::pow(stored(x[size_t(i * cols + j)]) - m, 2);
    v /= double(cols);
    const double rs = 1.0 / std::sqrt(v + 1e-5);
    EXPECT_NEAR(mean[size_t(i)], m, 1e-5 * (1 + std::fabs(m))) << "mean row " << i;
    EXPECT_NEAR(rstd[size_t(i)], rs, 1e-5 * rs) << "rstd row " << i;
    for (int64_t j = 0; j < cols; ++j) {
      const double want = (stored(x[size_t(i * cols + j)]) - m) * rs * stored(g[size_t(j)]) + stored(b[size_t(j)]);
      const double got = y[size_t(i * cols + j)];
      if (std::fabs(got - want) > y_rel * std::fabs(want) + 1e-5 * (1 + std::fabs(want))) {
        ADD_FAILURE() << "y[" << i << ", " << j << "] = " << got << ", float64 layer norm gives " << want;
        ++bad;
      }
    }
  }
}

TEST(OpCli, LayerNormForwardF32MatchesFloat64) {
  SKIP_WITHOUT("layer_norm");
  layer_norm_round_trip("f32", 7, 13);
  layer_norm_round_trip("f32", 33, 1031);
}

TEST(OpCli, LayerNormForwardBf16FromF32Files) {
  SKIP_WITHOUT("layer_norm");
  layer_norm_round_trip("bf16", 7, 13);
  layer_norm_round_trip("bf16", 33, 1031);
}

// ---------------------------------------------------------------- inout: softmax backward

TEST(OpCli, SoftmaxBackwardWritesItsInoutDy) {
  SKIP_WITHOUT("scaled_masked_softmax");
  TempDir t;
  Rng rng(suites::test_seed(seed(), "scaled_masked_softmax/backward"));
  const std::vector<int64_t> shape = {2, 3, 4, 17};
  const size_t n = 2 * 3 * 4 * 17;
  write_f32(t.path + "/x.npy", shape, draw(rng, n, -4.0, 4.0));
  npy::Array mask;  // u8 as NumPy bool: about a quarter masked
  mask.dtype = DType::u8;
  mask.boolean = true;
  mask.shape = {2, 1, 4, 17};
  for (int64_t i = 0; i < mask.numel(); ++i) mask.data.push_back(std::byte(rng.uniform() < 0.25));
  npy::write(t.path + "/mask.npy", mask);
  Result r = opforge_op({"scaled_masked_softmax", "--in", "x=" + t.path + "/x.npy", "--in",
                         "mask=" + t.path + "/mask.npy", "--param", "scale=0.5", "--out", t.path + "/fwd"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto dy_in = draw(rng, n, -1.0, 1.0);
  write_f32(t.path + "/dy.npy", shape, dy_in);
  r = opforge_op({"scaled_masked_softmax", "--entry", "backward", "--in", "dy=" + t.path + "/dy.npy", "--in",
                  "y=" + t.path + "/fwd/y.npy", "--param", "scale=0.5", "--out", t.path + "/bwd"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(listing(t.path + "/bwd"), std::set<std::string>{"dy.npy"});
  const auto y = read_values(t.path + "/fwd/y.npy", DType::f32, shape);
  const auto dx = read_values(t.path + "/bwd/dy.npy", DType::f32, shape);
  for (size_t row = 0; row < n / 17; ++row) {
    double dot = 0;
    for (size_t k = 0; k < 17; ++k) dot += dy_in[row * 17 + k] * y[row * 17 + k];
    for (size_t k = 0; k < 17; ++k) {
      const size_t i = row * 17 + k;
      const double want = 0.5 * (dy_in[i] * y[i] - y[i] * dot);
      ASSERT_NEAR(dx[i], want, 2e-6 + 1e-5 * std::fabs(want)) << "dx at " << i;
    }
  }
}

// ---------------------------------------------------------------- refusals

struct BadCase {
  const char* what;
  std::vector<std::string> args;  // after "layer_norm"; {D} = the temp dir
  const char* names;              // the argument (or param) the error line must name
};

TEST(OpCli, BadInputsExit2WithOneLineAndWriteNothing) {
  SKIP_WITHOUT("layer_norm");
  TempDir t;
  Rng rng(suites::test_seed(seed(), "layer_norm/bad"));
  const std::string D = t.path;
  write_f32(D + "/x.npy", {5, 8}, draw(rng, 40, -1, 1));
  write_f32(D + "/gamma.npy", {8}, draw(rng, 8, 0.5, 1.5));
  write_f32(D + "/gamma7.npy", {7}, draw(rng, 7, 0.5, 1.5));
  write_f32(D + "/beta.npy", {8}, draw(rng, 8, -1, 1));
  npy::Array g64;
  g64.dtype = DType::f64;
  g64.shape = {8};
  g64.data.resize(64);
  npy::write(D + "/gamma64.npy", g64);
  const std::string junk = std::string("\x93NUMPY\x01\x00\xff\x00", 10) + "{'descr': '<f4'";  // header cut short
  std::ofstream(D + "/junk.npy", std::ios::binary) << junk;
  const std::vector<std::string> x = {"--in", "x=" + D + "/x.npy"}, gm = {"--in", "gamma=" + D + "/gamma.npy"},
                                 bt = {"--in", "beta=" + D + "/beta.npy"};
  auto cat = [](std::initializer_list<std::vector<std::string>> parts) {
    std::vector<std::string> v = {"layer_norm"};
    for (const auto& p : parts) v.insert(v.end(), p.begin(), p.end());
    return v;
  };
  const std::vector<BadCase> cases = {
      {"wrong shape", cat({x, {"--in", "gamma=" + D + "/gamma7.npy"}, bt}), "'gamma'"},
      {"missing input", cat({x, gm}), "'beta'"},
      {"unknown argument", cat({x, gm, bt, {"--in", "foo=" + D + "/beta.npy"}}), "'foo'"},
      {"twice", cat({x, x, gm, bt}), "'x'"},
      {"bad param value", cat({x, gm, bt, {"--param", "eps=-1"}}), "'eps'"},
      {"not a number", cat({x, gm, bt, {"--param", "eps=tiny"}}), "'eps'"},
      {"unknown param", cat({x, gm, bt, {"--param", "alpha=1"}}), "'alpha'"},
      {"unreadable file", cat({x, gm, {"--in", "beta=" + D + "/nope.npy"}}), "'beta'"},
      {"malformed file", cat({x, gm, {"--in", "beta=" + D + "/junk.npy"}}), "'beta'"},
      {"wrong dtype", cat({x, {"--in", "gamma=" + D + "/gamma64.npy"}, bt, {"--dtype", "f32"}}), "'gamma'"},
      {"wrong out shape", cat({x, gm, bt, {"--in", "mean=" + D + "/gamma.npy"}}), "'mean'"},
  };
  for (const bool out_exists : {false, true}) {
    const std::string out = D + "/out";
    if (out_exists) fs::create_directory(out);
    const auto parent_before = listing(D), out_before = listing(out);
    for (const BadCase& c : cases) {
      SCOPED_TRACE(std::string(c.what) + (out_exists ? " (DIR exists)" : ""));
      auto args = c.args;
      args.insert(args.end(), {"--out", out});
      const Result r = opforge_op(args);
      EXPECT_EQ(r.code, 2) << r.err;
      EXPECT_EQ(r.err.rfind("opforge op: ", 0), 0u) << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
      EXPECT_NE(r.err.find(c.names), std::string::npos) << r.err;
      EXPECT_EQ(listing(D), parent_before) << "no temp dir or output left beside DIR";
      EXPECT_EQ(listing(out), out_before);
    }
  }
  // the file names appear in .npy errors, with the byte offset for a malformed one
  Result r = opforge_op(cat({x, gm, {"--in", "beta=" + D + "/junk.npy"}, {"--out", D + "/o"}}));
  EXPECT_NE(r.err.find(D + "/junk.npy: byte 8: header length 255 runs past the end"), std::string::npos) << r.err;
  r = opforge_op(cat({x, {"--in", "gamma=" + D + "/gamma64.npy"}, bt, {"--dtype", "f32", "--out", D + "/o"}}));
  EXPECT_NE(r.err.find("gamma64.npy: field 'descr' is '<f8'"), std::string::npos) << r.err;
}

TEST(OpCli, ExistingOutputNeedsForce) {
  SKIP_WITHOUT("layer_norm");
  TempDir t;
  Rng rng(suites::test_seed(seed(), "layer_norm/force"));
  const std::string D = t.path;
  write_f32(D + "/x.npy", {3, 4}, draw(rng, 12, -1, 1));
  write_f32(D + "/gamma.npy", {4}, draw(rng, 4, 0.5, 1.5));
  write_f32(D + "/beta.npy", {4}, draw(rng, 4, -1, 1));
  fs::create_directory(D + "/out");
  std::ofstream(D + "/out/mean.npy") << "precious";
  std::ofstream(D + "/out/notes.txt") << "mine";
  const std::vector<std::string> args = {"layer_norm",
                                         "--in",
                                         "x=" + D + "/x.npy",
                                         "--in",
                                         "gamma=" + D + "/gamma.npy",
                                         "--in",
                                         "beta=" + D + "/beta.npy",
                                         "--out",
                                         D + "/out"};
  Result r = opforge_op(args);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("argument 'mean': " + D + "/out/mean.npy exists (use --force to overwrite)"), std::string::npos)
      << r.err;
  EXPECT_EQ(slurp(D + "/out/mean.npy"), "precious");
  EXPECT_EQ(listing(D + "/out"), (std::set<std::string>{"mean.npy", "notes.txt"}));
  auto forced = args;
  forced.push_back("--force");
  r = opforge_op(forced);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(listing(D + "/out"), (std::set<std::string>{"y.npy", "mean.npy", "rstd.npy", "notes.txt"}));
  EXPECT_EQ(npy::read(D + "/out/mean.npy").shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(slurp(D + "/out/notes.txt"), "mine");
  EXPECT_EQ(listing(D), (std::set<std::string>{"x.npy", "gamma.npy", "beta.npy", "out"}));
}

// Lists end to end: fused_adam's step on two tensors of different sizes (one --in per element),
// every updated list element written as NAME.K.npy and checked against Adam in double (L2 mode).
TEST(OpCli, ListArgumentsRoundTripThroughFusedAdam) {
  SKIP_WITHOUT("fused_adam");
  TempDir t;
  Rng rng(suites::test_seed(seed(), "fused_adam/lists"));
  const std::string D = t.path;
  const std::vector<int64_t> sizes = {37, 5};
  std::vector<std::vector<float>> g, p, m, v;
  std::vector<std::string> args = {"fused_adam", "--entry", "step"};
  for (size_t k = 0; k < sizes.size(); ++k) {
    const size_t n = size_t(sizes[k]);
    g.push_back(draw(rng, n, -1, 1));
    p.push_back(draw(rng, n, -2, 2));
    m.push_back(draw(rng, n, -0.1, 0.1));
    v.push_back(draw(rng, n, 0.01, 0.2));
    const std::string K = std::to_string(k);
    for (auto [name, vals] : {std::pair{"grads", &g[k]}, {"params", &p[k]}, {"exp_avg", &m[k]}, {"exp_avg_sq", &v[k]}})
      args.insert(args.end(),
                  {"--in", std::string(name) + "=" + write_f32(D + "/" + name + K + ".npy", {sizes[k]}, *vals)});
  }
  npy::Array flag;
  flag.dtype = DType::i32;
  flag.shape = {1};
  flag.data.assign(4, std::byte{0});
  npy::write(D + "/flag.npy", flag);
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.05;
  args.insert(args.end(), {"--in", "noop_flag=" + D + "/flag.npy", "--param", "lr=0.01", "--param", "weight_decay=0.05",
                           "--param", "adam_w_mode=false", "--out", D + "/out"});
  const Result r = opforge_op(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(listing(D + "/out"),
            (std::set<std::string>{"params.0.npy", "params.1.npy", "exp_avg.0.npy", "exp_avg.1.npy", "exp_avg_sq.0.npy",
                                   "exp_avg_sq.1.npy", "noop_flag.npy"}));
  EXPECT_EQ(read_values(D + "/out/noop_flag.npy", DType::i32, {1})[0], 0.0);
  for (size_t k = 0; k < sizes.size(); ++k) {
    const std::string K = std::to_string(k);
    const auto gp = read_values(D + "/out/params." + K + ".npy", DType::f32, {sizes[k]});
    const auto gm = read_values(D + "/out/exp_avg." + K + ".npy", DType::f32, {sizes[k]});
    const auto gv = read_values(D + "/out/exp_avg_sq." + K + ".npy", DType::f32, {sizes[k]});
    for (size_t i = 0; i < size_t(sizes[k]); ++i) {
      const double gi = double(g[k][i]) + wd * p[k][i];  // L2: decay into the gradient
      const double mi = b1 * m[k][i] + (1 - b1) * gi, vi = b2 * v[k][i] + (1 - b2) * gi * gi;
      const double pi = p[k][i] - lr * (mi / (1 - b1)) / (std::sqrt(vi / (1 - b2)) + eps);
      EXPECT_NEAR(gm[i], mi, 1e-6 * (1 + std::fabs(mi))) << "exp_avg." << K << "[" << i << "]";
      EXPECT_NEAR(gv[i], vi, 1e-6 * (1 + std::fabs(vi))) << "exp_avg_sq." << K << "[" << i << "]";
      EXPECT_NEAR(gp[i], pi, 2e-6 * (1 + std::fabs(pi))) << "params." << K << "[" << i << "]";
    }
  }
  // a list length mismatch names the list; nothing is written
  std::vector<std::string> short_list;
  for (size_t i = 0; i < args.size(); ++i)
    if (!(args[i] == "--in" && args[i + 1].rfind("exp_avg=", 0) == 0 &&
          args[i + 1].find("exp_avg1") != std::string::npos)) {
      short_list.push_back(args[i]);
    } else {
      ++i;
    }
  short_list.back() = D + "/out2";
  const Result bad = opforge_op(short_list);
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_NE(bad.err.find("exp_avg"), std::string::npos) << bad.err;
  EXPECT_EQ(bad.err.find('\n'), bad.err.size() - 1) << "not one line: " << bad.err;
  EXPECT_FALSE(fs::exists(D + "/out2"));
}

// A label outside [0, C) that is not padding_idx is bad input: exit 2 naming the row, no files.
TEST(OpCli, XentropyLabelOutOfRangeIsRefusedNamingTheRow) {
  SKIP_WITHOUT("softmax_xentropy");
  TempDir t;
  Rng rng(suites::test_seed(seed(), "softmax_xentropy/labels"));
  const std::string D = t.path;
  write_f32(D + "/logits.npy", {3, 5}, draw(rng, 15, -3, 3));
  npy::Array labels;
  labels.dtype = DType::i64;
  labels.shape = {3};
  const int64_t vals[3] = {0, 7, 2};
  labels.data.resize(sizeof vals);
  std::memcpy(labels.data.data(), vals, sizeof vals);
  npy::write(D + "/labels.npy", labels);
  const Result r = opforge_op({"softmax_xentropy", "--in", "logits=" + D + "/logits.npy", "--in",
                               "labels=" + D + "/labels.npy", "--out", D + "/out"});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("labels[1] = 7 is outside [0, 5)"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(D + "/out"));
}

// fused_sgd's step through the CLI: two tensors of different sizes, Nesterov momentum with weight
// decay, checked against SGD in double; a momentum_buffer list one short is bad input (exit 2,
// one line naming the list, no files).
TEST(OpCli, FusedSgdStepAndAShortListNamingIt) {
  SKIP_WITHOUT("fused_sgd");
  TempDir t;
  Rng rng(suites::test_seed(seed(), "fused_sgd/lists"));
  const std::string D = t.path;
  const std::vector<int64_t> sizes = {37, 5};
  std::vector<std::vector<float>> g, p, b;
  std::vector<std::string> args = {"fused_sgd"};
  for (size_t k = 0; k < sizes.size(); ++k) {
    const size_t n = size_t(sizes[k]);
    g.push_back(draw(rng, n, -1, 1));
    p.push_back(draw(rng, n, -2, 2));
    b.push_back(draw(rng, n, -0.5, 0.5));
    const std::string K = std::to_string(k);
    for (auto [name, vals] : {std::pair{"grads", &g[k]}, {"params", &p[k]}, {"momentum_buffer", &b[k]}})
      args.insert(args.end(),
                  {"--in", std::string(name) + "=" + write_f32(D + "/" + name + K + ".npy", {sizes[k]}, *vals)});
  }
  npy::Array flag;
  flag.dtype = DType::i32;
  flag.shape = {1};
  flag.data.assign(4, std::byte{0});
  npy::write(D + "/flag.npy", flag);
  const double lr = 0.05, mu = 0.9, wd = 0.01;
  args.insert(args.end(), {"--in", "noop_flag=" + D + "/flag.npy", "--param", "lr=0.05", "--param", "weight_decay=0.01",
                           "--param", "nesterov=true", "--out", D + "/out"});
  const Result r = opforge_op(args);
  ASSERT_EQ(r.code, 0) << r.err;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const std::string K = std::to_string(k);
    const auto gp = read_values(D + "/out/params." + K + ".npy", DType::f32, {sizes[k]});
    const auto gb = read_values(D + "/out/momentum_buffer." + K + ".npy", DType::f32, {sizes[k]});
    for (size_t i = 0; i < size_t(sizes[k]); ++i) {
      const double gi = double(g[k][i]) + wd * p[k][i], bi = mu * b[k][i] + gi, pi = p[k][i] - lr * (gi + mu * bi);
      EXPECT_NEAR(gb[i], bi, 1e-6 * (1 + std::fabs(bi))) << "momentum_buffer." << K << "[" << i << "]";
      EXPECT_NEAR(gp[i], pi, 1e-6 * (1 + std::fabs(pi))) << "params." << K << "[" << i << "]";
    }
  }
  std::vector<std::string> short_list;
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i] == "--in" && args[i + 1].rfind("momentum_buffer=", 0) == 0 &&
        args[i + 1].find("buffer1") != std::string::npos) {
      ++i;
    } else {
      short_list.push_back(args[i]);
    }
  short_list.back() = D + "/out2";
  const Result bad = opforge_op(short_list);
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_NE(bad.err.find("list momentum_buffer has 1 tensors, grads has 2"), std::string::npos) << bad.err;
  EXPECT_EQ(bad.err.find('\n'), bad.err.size() - 1) << "not one line: " << bad.err;
  EXPECT_FALSE(fs::exists(D + "/out2"));
}

// index_mul_2d forward through the CLI (out = in1[idx] * in2: one f32 product, so exact bits),
// then an index outside [0, M): exit 2 naming idx and the position, no files.
TEST(OpCli, IndexMul2dForwardAndAnOutOfRangeIndex) {
  SKIP_WITHOUT("index_mul_2d");
  TempDir t;
  Rng rng(suites::test_seed(seed(), "index_mul_2d/idx"));
  const std::string D = t.path;
  const auto in1 = draw(rng, 4 * 3, -1, 1), in2 = draw(rng, 5 * 3, -1, 1);
  write_f32(D + "/in1.npy", {4, 3}, in1);
  write_f32(D + "/in2.npy", {5, 3}, in2);
  auto write_idx = [&](std::vector<int64_t> v) {
    npy::Array a;
    a.dtype = DType::i64;
    a.shape = {int64_t(v.size())};
    a.data.resize(v.size() * 8);
    std::memcpy(a.data.data(), v.data(), a.data.size());
    npy::write(D + "/idx.npy", a);
  };
  const std::vector<int64_t> idx = {3, 0, 3, 1, 2};
  write_idx(idx);
  const std::vector<std::string> args = {"index_mul_2d",          "--in", "in1=" + D + "/in1.npy", "--in",
                                         "in2=" + D + "/in2.npy", "--in", "idx=" + D + "/idx.npy", "--out"};
  auto with_out = [&](const std::string& out) {
    auto a = args;
    a.push_back(out);
    return a;
  };
  const Result r = opforge_op(with_out(D + "/out"));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto out = read_values(D + "/out/out.npy", DType::f32, {5, 3});
  for (size_t i = 0; i < 5; ++i)
    for (size_t c = 0; c < 3; ++c)
      EXPECT_EQ(out[i * 3 + c], double(in1[size_t(idx[i]) * 3 + c] * in2[i * 3 + c])) << i << "," << c;
  write_idx({3, 4, 0, 1, 2});
  const Result bad = opforge_op(with_out(D + "/out2"));
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_NE(bad.err.find("idx[1] = 4 is outside [0, 4)"), std::string::npos) << bad.err;
  EXPECT_EQ(bad.err.find('\n'), bad.err.size() - 1) << "not one line: " << bad.err;
  EXPECT_FALSE(fs::exists(D + "/out2"));
}

}  // namespace
}  // namespace opf::cli
