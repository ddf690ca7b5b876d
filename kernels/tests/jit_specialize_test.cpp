// CPU JIT specializations (core/loader.cpp, cpu/storage.h): load() compiles nothing; each
// (entry, storage dtype) pair is compiled at its first call, once, and computes exactly what the
// whole module computes. A pair's module refuses other pairs rather than returning untouched outputs.
// On layer_norm (two entries, three dtypes), JIT forced, in a fresh cache; variants (a module per
// value of a param the manifest marks jit_variant) on transducer_joint's relu (cpu/variant.h).
#include <dlfcn.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "opforge/build_info.h"
#include "opforge/call.h"
#include "opforge/dtype.h"
#include "opforge/error.h"
#include "opforge/loader.h"

namespace opf {
namespace {
namespace fs = std::filesystem;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// One layer_norm call's tensors in storage dtype T (f32 or a 16-bit type), drawn from a seed.
struct Call {
  int64_t rows = 7, cols = 37;  // a tail after the vectors; several rows
  DType t;
  std::vector<uint16_t> x16, g16, b16, y16, dy16, dx16, dg16, db16;
  std::vector<float> x32, g32, b32, y32, dy32, dx32, dg32, db32, mean, rstd;

  Call(DType dtype, uint64_t seed) : t(dtype) {
    std::printf("seed %llu\n", (unsigned long long)seed);
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    auto draw = [&](size_t n, std::vector<float>* f, std::vector<uint16_t>* h) {
      f->resize(n);
      h->resize(n);
      for (size_t i = 0; i < n; ++i) {
        const float v = u(rng);
        (*f)[i] = v;
        (*h)[i] = t == DType::bf16 ? f32_to_bf16(v) : f32_to_f16(v);
      }
    };
    const size_t n = size_t(rows * cols), c = size_t(cols);
    draw(n, &x32, &x16);
    draw(c, &g32, &g16);
    draw(c, &b32, &b16);
    draw(n, &dy32, &dy16);
    // outputs poisoned: a pair that computes nothing cannot pass
    for (auto* v : {&y32, &dx32}) v->assign(n, NAN);
    for (auto* v : {&dg32, &db32}) v->assign(c, NAN);
    for (auto* v : {&y16, &dx16}) v->assign(n, 0x7e01);
    for (auto* v : {&dg16, &db16}) v->assign(c, 0x7e01);
    mean.assign(size_t(rows), NAN);
    rstd.assign(size_t(rows), NAN);
  }
  void* p(std::vector<float>& f, std::vector<uint16_t>& h) {
    return t == DType::f32 ? (void*)f.data() : (void*)h.data();
  }

  void forward(const opf_module_info* m) {
    CallBuilder c(*find_op("layer_norm"), "forward");
    c.add("x", p(x32, x16), t, {rows, cols}).add("gamma", p(g32, g16), t, {cols}).add("beta", p(b32, b16), t, {cols});
    c.add("y", p(y32, y16), t, {rows, cols}).add("mean", mean.data(), DType::f32, {rows});
    c.add("rstd", rstd.data(), DType::f32, {rows});
    c.run(m);
  }
  void backward(const opf_module_info* m) {  // after forward (mean, rstd)
    CallBuilder c(*find_op("layer_norm"), "backward");
    c.add("dy", p(dy32, dy16), t, {rows, cols}).add("x", p(x32, x16), t, {rows, cols});
    c.add("mean", mean.data(), DType::f32, {rows}).add("rstd", rstd.data(), DType::f32, {rows});
    c.add("gamma", p(g32, g16), t, {cols}).add("dx", p(dx32, dx16), t, {rows, cols});
    c.add("dgamma", p(dg32, dg16), t, {cols}).add("dbeta", p(db32, db16), t, {cols});
    c.run(m);
  }
  // every output's bytes
  std::vector<std::vector<uint8_t>> outputs() const {
    auto bytes = [](const auto& v) {
      const auto* b = reinterpret_cast<const uint8_t*>(v.data());
      return std::vector<uint8_t>(b, b + v.size() * sizeof(v[0]));
    };
    if (t == DType::f32) return {bytes(y32), bytes(mean), bytes(rstd), bytes(dx32), bytes(dg32), bytes(db32)};
    return {bytes(y16), bytes(mean), bytes(rstd), bytes(dx16), bytes(dg16), bytes(db16)};
  }
};

class JitSpecialize : public ::testing::Test {
 protected:
  fs::path tmp;
  const OpInfo* op = nullptr;

  virtual const char* op_name() const { return "layer_norm"; }
  void SetUp() override {
    op = find_op(op_name());
    if (!op || !op->has_backend("cpu")) GTEST_SKIP() << op_name() << "'s cpu backend is not built";
    char tmpl[] = "/tmp/opforge-jit-specialize-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    tmp = tmpl;
    ::setenv("OPFORGE_CACHE_DIR", (tmp / "cache").c_str(), 1);
    ::setenv("OPFORGE_FORCE_JIT", "1", 1);
    ::unsetenv("OPFORGE_JIT_SPECIALIZE");
    Loader::instance().forget();
  }
  void TearDown() override {
    ::unsetenv("OPFORGE_JIT_SPECIALIZE");
    ::unsetenv("OPFORGE_SOURCE_DIR");
    Loader::instance().forget();
    if (!tmp.empty()) fs::remove_all(tmp);
  }
  int compiles() const { return Loader::instance().stats().compiles; }
  static const opf_module_info* open(const fs::path& so) {
    void* h = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    EXPECT_NE(h, nullptr) << ::dlerror();
    auto fn = h ? reinterpret_cast<opf_module_fn>(::dlsym(h, "opf_module")) : nullptr;
    EXPECT_NE(fn, nullptr) << so;
    return fn ? fn() : nullptr;
  }
  // The op's cached modules: its host code (`host`) or a pair's kernels, which hold a kernel table.
  std::vector<fs::path> modules(bool host = false) const {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(tmp / "cache" / op_name() / "cpu")) {
      const fs::path so = e.path() / "module.so";
      if (!fs::exists(so)) continue;
      const opf_module_info* m = open(so);
      if (m && (m->impl == nullptr) == host) out.push_back(so);
    }
    return out;
  }
  // A pair's kernels module joined to the op's host module, as the loader joins them.
  const opf_module_info* joined(const fs::path& kernels) {
    const std::vector<fs::path> host = modules(true);
    EXPECT_EQ(host.size(), 1u) << "the op's host code is not one cached module";
    const opf_module_info* k = open(kernels);
    if (host.size() != 1 || !k) return nullptr;
    opf_module_info& j = joined_.emplace_back(*open(host[0]));
    j.isa = k->isa;
    j.impl = k->impl;
    return &j;
  }
  std::deque<opf_module_info> joined_;
  // Calls every cached module once with each of two values of its variant param: each module must
  // run exactly one and refuse the other. Returns the refusals, sorted.
  template <class CallA, class CallB>
  std::vector<std::string> refusals(CallA call_a, CallB call_b) {
    std::vector<std::string> whys;
    for (const fs::path& so : modules()) {
      const opf_module_info* variant = joined(so);
      if (!variant) continue;
      const std::string as_a = error_of([&] { call_a(variant); });
      const std::string as_b = error_of([&] { call_b(variant); });
      EXPECT_TRUE(as_a.empty() != as_b.empty())
          << so << " ran both values or neither: '" << as_a << "' / '" << as_b << "'";
      whys.push_back(as_a + as_b);
    }
    std::sort(whys.begin(), whys.end());
    return whys;
  }
};

TEST_F(JitSpecialize, EachPairCompilesAtItsFirstCallOnceAndMatchesTheWholeModule) {
  auto& L = Loader::instance();
  const int c0 = compiles();
  const LoadedModule& m = L.load(*op, "cpu");
  ASSERT_EQ(m.source, ModuleSource::jit_specialized);
  EXPECT_EQ(compiles(), c0) << "load() compiled something";

  Call f16(DType::f16, 1234), f32(DType::f32, 99);
  f16.forward(m.info);
  EXPECT_EQ(compiles(), c0 + 2) << "forward f16 compiled more than its pair and the op's host code";
  f16.forward(m.info);
  EXPECT_EQ(compiles(), c0 + 2) << "the second call compiled again";
  f16.backward(m.info);
  f32.forward(m.info);
  f32.backward(m.info);
  EXPECT_EQ(compiles(), c0 + 5) << "the host code compiled more than once";
  EXPECT_EQ(modules().size(), 4u) << "one cache entry per pair";
  EXPECT_EQ(modules(true).size(), 1u) << "one cache entry for the op's host code";
  EXPECT_STRNE(m.info->isa, "host (JIT)") << "the pairs' target is not reported";

  // the whole module, from the same sources, on the same inputs
  ::setenv("OPFORGE_JIT_SPECIALIZE", "0", 1);
  L.forget();
  const LoadedModule& whole = L.load(*op, "cpu");
  ASSERT_EQ(whole.source, ModuleSource::jit_compiled);
  Call w16(DType::f16, 1234), w32(DType::f32, 99);
  w16.forward(whole.info);
  w16.backward(whole.info);
  w32.forward(whole.info);
  w32.backward(whole.info);
  EXPECT_EQ(f16.outputs(), w16.outputs()) << "f16: a pair's module computes other bits than the whole module";
  EXPECT_EQ(f32.outputs(), w32.outputs()) << "f32: a pair's module computes other bits than the whole module";
  for (float v : f32.y32) ASSERT_TRUE(std::isfinite(v));
}

TEST_F(JitSpecialize, PrepareCompilesEveryPairOnceAndTheCacheServesTheNextProcessLookup) {
  auto& L = Loader::instance();
  const int pairs = int(op->entries.size() * op->dtypes.size());
  EXPECT_EQ(L.prepare(*op, "cpu", "backward", "bf16"), 1);
  EXPECT_EQ(L.prepare(*op, "cpu"), pairs - 1);
  EXPECT_EQ(L.prepare(*op, "cpu"), 0);
  L.forget();  // a fresh lookup: every pair is a cache hit
  const int hits = L.stats().cache_hits;
  EXPECT_EQ(L.prepare(*op, "cpu"), 0);
  EXPECT_EQ(L.stats().cache_hits, hits + pairs + 1) << "every pair and the op's host code";
  EXPECT_NE(error_of([&] { L.prepare(*op, "cpu", "sideways"); }).find("has no entry 'sideways'"), std::string::npos);
}

// The host module a pair joins comes from the sources the pair's kernels came from: after an edit
// (here a comment appended to the op's cpu.cpp, in a copy of the tree), the next pair compiles
// with the op's host code again, and the joined modules compute what they did before.
TEST_F(JitSpecialize, AnEditedSourceBringsTheHostModuleAlongWithTheNextPair) {
  const fs::path src = tmp / "src";
  fs::create_directories(src);
  fs::copy(build::source_root() + "/kernels", src / "kernels", fs::copy_options::recursive);
  ::setenv("OPFORGE_SOURCE_DIR", src.c_str(), 1);
  auto& L = Loader::instance();
  L.forget();
  const int c0 = compiles();
  Call a(DType::f32, 5), b(DType::f32, 5);
  a.forward(L.load(*op, "cpu").info);
  EXPECT_EQ(compiles(), c0 + 2) << "forward f32 and the op's host code";
  std::ofstream(src / "kernels" / "ops" / op_name() / "cpu.cpp", std::ios::app) << "// edited\n";
  a.backward(L.load(*op, "cpu").info);
  EXPECT_EQ(compiles(), c0 + 4) << "backward f32 after the edit: its pair and the host code again";
  EXPECT_EQ(modules(true).size(), 2u) << "a host module per source state";
  L.forget();
  const opf_module_info* m = L.load(*op, "cpu").info;
  b.forward(m);
  b.backward(m);
  EXPECT_EQ(compiles(), c0 + 5) << "forward from the edited sources; their host code and backward are cached";
  EXPECT_EQ(a.outputs(), b.outputs());
}

TEST_F(JitSpecialize, CallsTheOpRejectsGetTheOpsOwnReason) {
  auto& L = Loader::instance();
  const opf_module_info* m = L.load(*op, "cpu").info;
  opf_call unknown{"sideways", nullptr, 0, nullptr, 0, nullptr, nullptr};
  char err[256] = {0};
  EXPECT_EQ(m->run(m, &unknown, err, sizeof err), 1);
  EXPECT_NE(std::string(err).find("unknown entry 'sideways'"), std::string::npos) << err;
  // f64 tensors: layer_norm has no f64; its f32 pair's module says what it accepts
  std::vector<double> x(12, 1.0), g(4, 1.0), b(4, 0.0), y(12, 0.0);
  std::vector<float> mean(3), rstd(3);
  CallBuilder c(*op, "forward");
  c.add("x", x.data(), DType::f64, {3, 4})
      .add("gamma", g.data(), DType::f64, {4})
      .add("beta", b.data(), DType::f64, {4});
  c.add("y", y.data(), DType::f64, {3, 4})
      .add("mean", mean.data(), DType::f32, {3})
      .add("rstd", rstd.data(), DType::f32, {3});
  const std::string why = c.supports(m);
  EXPECT_NE(why.find("f32/f16/bf16"), std::string::npos) << why;
  EXPECT_NE(error_of([&] { c.run(m); }).find(why), std::string::npos) << "run and supports disagree";
}

TEST_F(JitSpecialize, APairsModuleRefusesAnotherDtypeInsteadOfLeavingOutputsUntouched) {
  auto& L = Loader::instance();
  ASSERT_EQ(L.prepare(*op, "cpu", "forward", "f32"), 1);
  const auto found = modules();
  ASSERT_EQ(found.size(), 1u);
  const opf_module_info* pair = joined(found[0]);
  ASSERT_NE(pair, nullptr);
  char err[256] = {0};
  opf_call any{"forward", nullptr, 0, nullptr, 0, nullptr, nullptr};
  EXPECT_EQ(open(found[0])->run(open(found[0]), &any, err, sizeof err), 1) << "a kernels module ran on its own";
  Call f16(DType::f16, 7), f32(DType::f32, 7);
  const std::string why = error_of([&] { f16.forward(pair); });
  EXPECT_NE(why.find("entry 'forward' has no f16 kernels in this module"), std::string::npos) << why;
  const std::string backward = error_of([&] {
    f32.forward(pair);
    f32.backward(pair);
  });
  EXPECT_NE(backward.find("entry 'backward' has no f32 kernels in this module"), std::string::npos) << backward;
  for (float v : f32.y32) EXPECT_TRUE(std::isfinite(v)) << "its own pair still computes";
}

// A param the manifest marks jit_variant for an entry splits that entry's modules by its value:
// transducer_joint's relu (and dropout_prob, zero here) for forward. One module per value, each
// compiled at its first call; the relu variant computes exactly max(h, 0) of the other's h; a
// variant's module refuses the other value with one line instead of computing it without (or
// with) the relu.
class JitVariant : public JitSpecialize {
 protected:
  const char* op_name() const override { return "transducer_joint"; }
  // h = f + g of forward (every length full: no don't-care region), with or without relu
  std::vector<float> forward(const opf_module_info* m, bool relu) const {
    const int64_t nb = 2, nt = 3, nu = 5, nh = 37;  // a tail after the vectors
    std::mt19937_64 rng(4242);
    std::printf("seed 4242\n");
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    std::vector<float> f(size_t(nb * nt * nh)), g(size_t(nb * nu * nh));
    for (auto* v : {&f, &g})
      for (float& e : *v) e = u(rng);
    const size_t batches = size_t(nb);
    const int32_t full_t = int32_t(nt), full_u = int32_t(nu);
    std::vector<int32_t> f_len(batches, full_t), g_len(batches, full_u);
    std::vector<int64_t> offset(batches);
    for (size_t b = 0; b < batches; ++b) offset[b] = int64_t(b + 1) * nt * nu;
    uint8_t no_mask = 0;
    std::vector<float> h(size_t(nb * nt * nu * nh), NAN);  // poisoned
    CallBuilder c(*op, "forward");
    c.add("f", f.data(), DType::f32, {nb, nt, nh}).add("g", g.data(), DType::f32, {nb, nu, nh});
    c.add("f_len", f_len.data(), DType::i32, {nb}).add("g_len", g_len.data(), DType::i32, {nb});
    c.add("batch_offset", offset.data(), DType::i64, {nb}).add("mask", &no_mask, DType::u8, {0});
    c.add("h", h.data(), DType::f32, {nb, nt, nu, nh});
    c.param("relu", relu ? 1 : 0);
    c.run(m);
    return h;
  }
};

TEST_F(JitVariant, EachValueCompilesItsOwnModuleAtItsFirstCall) {
  auto& L = Loader::instance();
  const opf_module_info* m = L.load(*op, "cpu").info;
  const int c0 = compiles();
  const std::vector<float> plain = forward(m, false);
  EXPECT_EQ(compiles(), c0 + 2) << "the variant and the op's host code";
  const std::vector<float> relu = forward(m, true);
  EXPECT_EQ(compiles(), c0 + 3) << "relu = true did not get a module of its own";
  EXPECT_EQ(forward(m, false), plain);
  EXPECT_EQ(compiles(), c0 + 3) << "a variant compiled again";
  EXPECT_EQ(modules().size(), 2u);
  size_t negative = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_TRUE(std::isfinite(plain[i])) << i;
    const float want = plain[i] > 0.0f ? plain[i] : 0.0f;
    ASSERT_EQ(std::memcmp(&relu[i], &want, sizeof want), 0) << "element " << i << ": " << relu[i] << " vs " << want;
    negative += plain[i] < 0.0f;
  }
  EXPECT_GT(negative, 0u) << "the draw has no negative h: the relu was not exercised";
  // forward and backward: relu x dropout_prob; dropout_mask: one
  const CacheState cs = L.cache_state(*op, "cpu");
  EXPECT_EQ(cs.pairs, int(op->dtypes.size()) * (4 + 4 + 1));
}

TEST_F(JitVariant, AVariantsModuleRefusesTheOtherValue) {
  auto& L = Loader::instance();
  EXPECT_EQ(L.prepare(*op, "cpu", "forward", "f32", "relu=0,dropout_prob=0"), 1);
  EXPECT_EQ(L.prepare(*op, "cpu", "forward", "f32", "relu=1,dropout_prob=0"), 1);
  EXPECT_NE(error_of([&] { L.prepare(*op, "cpu", "forward", "f32", "relu=2"); }).find("JIT variant 'relu=2'"),
            std::string::npos);
  const std::vector<std::string> whys = refusals([&](const opf_module_info* v) { forward(v, false); },
                                                 [&](const opf_module_info* v) { forward(v, true); });
  ASSERT_EQ(whys.size(), 2u);
  EXPECT_NE(whys[0].find("this JIT module is the variant relu=0, called with relu=1"), std::string::npos) << whys[0];
  EXPECT_NE(whys[1].find("this JIT module is the variant relu=1, called with relu=0"), std::string::npos) << whys[1];
}

// A numeric param with manifest jit_values: a variant per listed value, one for any other.
// focal_loss's gamma: 0, 1 and 2 have kernels of their own (gamma=0..2), every other value shares
// the general one (gamma=3); a module refuses a gamma of another variant in one line.
class JitValues : public JitSpecialize {
 protected:
  const char* op_name() const override { return "focal_loss"; }
  // forward's loss for gamma, on one draw (seed printed), through m
  float forward(const opf_module_info* m, double gamma) const {
    const int64_t n = 3, cpad = 80;
    std::mt19937_64 rng(777);
    std::printf("seed 777\n");
    std::uniform_real_distribution<float> u(-3.0f, 3.0f);
    std::vector<float> logits(size_t(n * cpad)), grad(size_t(n * cpad), NAN);
    for (float& v : logits) v = u(rng);
    std::vector<int64_t> labels{5, -1, 79};
    float num_pos = 2.0f, loss = NAN;
    CallBuilder c(*op, "forward");
    c.add("logits", logits.data(), DType::f32, {n, cpad}).add("labels", labels.data(), DType::i64, {n});
    c.add("num_positives_sum", &num_pos, DType::f32, {1}).add("loss", &loss, DType::f32, {1});
    c.add("partial_grad", grad.data(), DType::f32, {n, cpad});
    c.param("gamma", gamma);
    c.run(m);
    return loss;
  }
};

TEST_F(JitValues, ListedValuesAndTheRestGetAModuleEach) {
  EXPECT_EQ(op->jit_variants("forward"), (std::vector<std::string>{"gamma=0", "gamma=1", "gamma=2", "gamma=3"}));
  EXPECT_EQ(op->jit_variants("backward"), std::vector<std::string>{""});
  const ParamInfo* gamma = nullptr;
  for (const ParamInfo& p : op->params)
    if (p.name == "gamma") gamma = &p;
  ASSERT_NE(gamma, nullptr);
  for (const auto& [v, k] :
       std::vector<std::pair<double, int64_t>>{{0.0, 0}, {1.0, 1}, {2.0, 2}, {1.5, 3}, {2.0000001, 3}})
    EXPECT_EQ(gamma->jit_variant_of(v), k) << "gamma " << v;

  auto& L = Loader::instance();
  const opf_module_info* m = L.load(*op, "cpu").info;
  const int c0 = compiles();
  const float general = forward(m, 1.5);
  EXPECT_EQ(compiles(), c0 + 2) << "the variant and the op's host code";
  EXPECT_TRUE(std::isfinite(general) && general > 0) << general;
  EXPECT_EQ(forward(m, 2.5), forward(m, 2.5));
  EXPECT_EQ(compiles(), c0 + 2) << "gamma 2.5 is the same variant as 1.5";
  const float two = forward(m, 2.0);
  EXPECT_EQ(compiles(), c0 + 3) << "gamma 2 did not get a module of its own";
  EXPECT_TRUE(std::isfinite(two) && two > 0) << two;

  const std::vector<std::string> whys =
      refusals([&](const opf_module_info* v) { forward(v, 2.0); }, [&](const opf_module_info* v) { forward(v, 0.5); });
  ASSERT_EQ(whys.size(), 2u);
  EXPECT_NE(whys[0].find("this JIT module is the variant gamma=2, called with gamma=3"), std::string::npos) << whys[0];
  EXPECT_NE(whys[1].find("this JIT module is the variant gamma=3, called with gamma=2"), std::string::npos) << whys[1];
}

}  // namespace
}  // namespace opf
