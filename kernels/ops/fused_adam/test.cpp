// fused_adam — what the registry sweep cannot state as "match the reference": the noop flag on
// entry (nothing written, bitwise), a non-finite gradient (flag set, NaN/inf only in that element,
// every other element bitwise as in a clean run), empty lists, list/numel/dtype mismatches (one
// line naming the list, nothing written), AdamW vs L2 with weight decay (the sweep's default
// weight_decay is 0), bias correction off, a step so large that the corrections are exactly 1,
// and thread counts on a list of many small tensors (the suite's threads.* test runs one tensor).
// Seeded inputs (seed printed). Every argument the kernel writes is inout, so there is nothing to
// poison: "nothing written" is checked bitwise against a snapshot, "every element updated" against
// the formula (m and v are f32, so an element left alone cannot pass). Runs the module the loader
// gives this build (prebuilt, or JIT-compiled in mode=jit), through the ABI.
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
constexpr uint64_t kSeed = 20250412;

struct Hyper {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  int64_t step = 1;
  double wd = 0;
  bool adamw = true, bias_correction = true;
};

// Four lists of `sizes.size()` tensors, g and p in dtype dt, m and v in f32, and the flag.
struct Lists {
  DType dt;
  std::vector<int64_t> sizes;
  std::vector<std::vector<std::byte>> g, p;
  std::vector<std::vector<float>> m, v;
  int32_t flag = 0;

  Lists(DType dt_, std::vector<int64_t> sizes_, uint64_t salt = 0) : dt(dt_), sizes(std::move(sizes_)) {
    std::mt19937_64 rng(kSeed + salt);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    auto draw = [&](double lo, double hi) { return lo + (hi - lo) * u(rng); };
    const size_t e = opf::dtype_size(dt);
    for (int64_t n : sizes) {
      g.emplace_back(size_t(n) * e);
      p.emplace_back(size_t(n) * e);
      m.emplace_back(size_t(n));
      v.emplace_back(size_t(n));
      for (int64_t i = 0; i < n; ++i) {
        opf::store_element(dt, g.back().data(), i, draw(-1, 1));
        opf::store_element(dt, p.back().data(), i, draw(-1, 1));
        m.back()[size_t(i)] = float(draw(-0.5, 0.5));
        v.back()[size_t(i)] = float(draw(0.01, 1.0));
      }
    }
  }
  double gv(size_t k, int64_t i) const { return opf::load_element(dt, g[k].data(), i); }
  double pv(size_t k, int64_t i) const { return opf::load_element(dt, p[k].data(), i); }
  void set_g(size_t k, int64_t i, double x) { opf::store_element(dt, g[k].data(), i, x); }

  // Every byte the kernel may write (p, m, v, flag), for bitwise comparisons.
  std::vector<std::byte> state() const {
    std::vector<std::byte> s;
    auto put = [&](const void* d, size_t n) {
      const auto* b = static_cast<const std::byte*>(d);
      s.insert(s.end(), b, b + n);
    };
    for (size_t k = 0; k < sizes.size(); ++k) {
      put(p[k].data(), p[k].size());
      put(m[k].data(), m[k].size() * 4);
      put(v[k].data(), v[k].size() * 4);
    }
    put(&flag, 4);
    return s;
  }
};

using Build = std::function<void(opf::CallBuilder&, Lists&)>;

void add_all(opf::CallBuilder& b, Lists& L) {
  for (const char* name : {"grads", "params", "exp_avg", "exp_avg_sq"}) b.empty_list(name);
  for (size_t k = 0; k < L.sizes.size(); ++k) {
    const opf::Shape s{L.sizes[k]};
    b.add("grads", L.g[k].data(), L.dt, s);
    b.add("params", L.p[k].data(), L.dt, s);
    b.add("exp_avg", L.m[k].data(), DType::f32, s);
    b.add("exp_avg_sq", L.v[k].data(), DType::f32, s);
  }
  b.add("noop_flag", &L.flag, DType::i32, {1});
}

const opf_module_info* module() {
  static const opf_module_info* m = [] {
    std::printf("seed %llu\n", (unsigned long long)kSeed);
    return opf::Loader::instance().load(*opf::find_op("fused_adam"), "cpu").info;
  }();
  return m;
}

// 0 on success; otherwise 1 and the one-line reason in *err.
int run(Lists& L, const Hyper& h, std::string* err = nullptr, const Build& build = add_all, int threads = 0) {
  try {
    opf::CallBuilder b(*opf::find_op("fused_adam"), "step");
    b.param("lr", h.lr).param("beta1", h.beta1).param("beta2", h.beta2).param("eps", h.eps);
    b.param("step", double(h.step)).param("weight_decay", h.wd);
    b.param("adam_w_mode", h.adamw).param("bias_correction", h.bias_correction).threads(threads);
    build(b, L);
    b.run(module());
    return 0;
  } catch (const opf::Error& e) {
    if (err) *err = e.what();
    return 1;
  }
}

// ref.cpp's contract, stated again: f32 factors, double arithmetic.
struct Expect {
  double p, m, v, tol_p, tol_m, tol_v;
};
Expect expect(const Lists& L, const Hyper& h, size_t k, int64_t i, const Lists& in) {
  const auto f = [](double x) { return double(float(x)); };
  const double b1 = f(h.beta1), omb1 = f(1 - h.beta1), b2 = f(h.beta2), omb2 = f(1 - h.beta2), lr = f(h.lr),
               eps = f(h.eps), wd = f(h.wd);
  const double rbc1 = h.bias_correction ? f(1 / (1 - std::pow(h.beta1, double(h.step)))) : 1;
  const double rbc2 = h.bias_correction ? f(1 / (1 - std::pow(h.beta2, double(h.step)))) : 1;
  double g = in.gv(k, i);
  const double p = in.pv(k, i), m0 = in.m[k][size_t(i)], v0 = in.v[k][size_t(i)];
  if (!h.adamw) g += wd * p;
  const double m = b1 * m0 + omb1 * g, v = b2 * v0 + omb2 * g * g;
  double u = m * rbc1 / (std::sqrt(v * rbc2) + eps);
  if (h.adamw) u += wd * p;
  const double uf = 0x1p-24, ut = opf::dtype_unit_roundoff(L.dt);
  Expect e{p - lr * u, m, v, 0, 0, 0};
  e.tol_m = 8 * uf * (b1 * std::fabs(m0) + omb1 * std::fabs(g) + std::fabs(m));
  e.tol_v = 8 * uf * (b2 * v0 + omb2 * g * g);
  const double tiny = L.dt == DType::f16 ? 0x1p-24 : L.dt == DType::bf16 ? 0x1p-133 : 0x1p-149;  // subnormal spacing
  e.tol_p = 2 * ut * std::fabs(e.p) + 16 * uf * (std::fabs(p) + lr * std::fabs(u)) + tiny;
  return e;
}

// Every element of `out` (the kernel's result from `in`) matches the contract.
void check_formula(const Lists& out, const Lists& in, const Hyper& h) {
  int bad = 0;
  for (size_t k = 0; k < out.sizes.size(); ++k)
    for (int64_t i = 0; i < out.sizes[k] && bad < 5; ++i) {
      const Expect e = expect(out, h, k, i, in);
      const double p = out.pv(k, i), m = out.m[k][size_t(i)], v = out.v[k][size_t(i)];
      if (std::fabs(p - e.p) > e.tol_p || std::fabs(m - e.m) > e.tol_m || std::fabs(v - e.v) > e.tol_v) {
        ++bad;
        ADD_FAILURE() << "tensor " << k << " element " << i << ": p " << p << " want " << e.p << ", m " << m << " want "
                      << e.m << ", v " << v << " want " << e.v;
      }
    }
}

const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

TEST(FusedAdam, NoopFlagOnEntrySkipsTheStepBitwise) {
  for (DType dt : kDtypes)
    for (int32_t flag : {1, -1, 7}) {
      Lists L(dt, {1, 17, 4099, 70000});
      L.flag = flag;
      const auto before = L.state();
      Hyper h;
      h.wd = 0.01;
      ASSERT_EQ(run(L, h), 0);
      EXPECT_TRUE(L.state() == before) << opf::dtype_name(dt) << ", flag " << flag << ": the step wrote something";
      EXPECT_EQ(L.flag, flag);
    }
}

TEST(FusedAdam, FiniteGradientsUpdateEveryElementAndLeaveTheFlagAlone) {
  for (DType dt : kDtypes) {
    Lists L(dt, {1, 2, 31, 65536 + 17, 1000});
    const Lists in = L;
    Hyper h;
    h.step = 7;
    ASSERT_EQ(run(L, h), 0);
    EXPECT_EQ(L.flag, 0) << opf::dtype_name(dt);
    check_formula(L, in, h);
  }
}

// A NaN or inf gradient: flag 1, that element's m, v and p non-finite as the formula says, every
// other element bitwise as in a run where that gradient was finite.
TEST(FusedAdam, NonFiniteGradientSetsTheFlagAndStaysInItsElement) {
  for (DType dt : kDtypes) {
    Lists bad(dt, {5, 100, 37}), clean = bad;
    bad.set_g(1, 17, std::numeric_limits<double>::infinity());
    bad.set_g(2, 3, std::nan(""));
    Hyper h;
    h.wd = 0.02;
    ASSERT_EQ(run(bad, h), 0);
    ASSERT_EQ(run(clean, h), 0);
    EXPECT_EQ(bad.flag, 1) << opf::dtype_name(dt);
    EXPECT_EQ(clean.flag, 0) << opf::dtype_name(dt);
    EXPECT_EQ(bad.m[1][17], std::numeric_limits<float>::infinity());
    EXPECT_EQ(bad.v[1][17], std::numeric_limits<float>::infinity());
    EXPECT_TRUE(std::isnan(bad.pv(1, 17)));  // inf / inf
    EXPECT_TRUE(std::isnan(bad.m[2][3]) && std::isnan(bad.v[2][3]) && std::isnan(bad.pv(2, 3)));
    const size_t e = opf::dtype_size(dt);
    for (size_t k = 0; k < bad.sizes.size(); ++k)
      for (int64_t i = 0; i < bad.sizes[k]; ++i) {
        if ((k == 1 && i == 17) || (k == 2 && i == 3)) continue;
        EXPECT_EQ(0, std::memcmp(&bad.p[k][size_t(i) * e], &clean.p[k][size_t(i) * e], e)) << k << "/" << i;
        EXPECT_EQ(0, std::memcmp(&bad.m[k][size_t(i)], &clean.m[k][size_t(i)], 4)) << k << "/" << i;
        EXPECT_EQ(0, std::memcmp(&bad.v[k][size_t(i)], &clean.v[k][size_t(i)], 4)) << k << "/" << i;
      }
    // the grad scaler skips the step: the set flag now makes the next call a no-op
    const auto after = bad.state();
    ASSERT_EQ(run(bad, h), 0);
    EXPECT_TRUE(bad.state() == after);
  }
}

TEST(FusedAdam, EmptyListsAreANoOp) {
  for (int32_t flag : {0, 1}) {
    Lists L(DType::f32, {});
    L.flag = flag;
    std::string err;
    ASSERT_EQ(run(L, Hyper{}, &err), 0) << err;
    EXPECT_EQ(L.flag, flag);
  }
}

// A malformed call fails with one line naming the list (and index), and writes nothing.
void expect_refused(const char* what, const Build& build, const std::string& needle) {
  Lists L(DType::f32, {3, 64, 5, 9});
  const auto before = L.state();
  std::string err;
  EXPECT_NE(run(L, Hyper{}, &err, build), 0) << what;
  EXPECT_NE(err.find(needle), std::string::npos) << what << ": " << err;
  EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  EXPECT_TRUE(L.state() == before) << what << ": written despite the error";
}

TEST(FusedAdam, MismatchedListsAreRefusedNamingTheList) {
  // lists built by hand: `skip` leaves out element k of a list, `numel`/`dtype` change one
  struct Tweak {
    const char* list;
    int skip = -1, numel = -1, dtype = -1;
  };
  auto build = [](Tweak t) {
    return [t](opf::CallBuilder& b, Lists& L) {
      static std::vector<uint16_t> f16_buf(64);
      for (const char* name : {"grads", "params", "exp_avg", "exp_avg_sq"}) b.empty_list(name);
      for (size_t k = 0; k < L.sizes.size(); ++k) {
        const std::string_view names[] = {"grads", "params", "exp_avg", "exp_avg_sq"};
        void* data[] = {L.g[k].data(), L.p[k].data(), L.m[k].data(), L.v[k].data()};
        const DType dts[] = {L.dt, L.dt, DType::f32, DType::f32};
        for (int a = 0; a < 4; ++a) {
          const bool mine = names[a] == t.list;
          if (mine && t.skip == int(k)) continue;
          int64_t n = L.sizes[k];
          if (mine && t.numel == int(k)) n -= 1;
          if (mine && t.dtype == int(k)) {
            b.add(names[a], f16_buf.data(), DType::f16, {n});
            continue;
          }
          b.add(names[a], data[a], dts[a], {n});
        }
      }
      b.add("noop_flag", &L.flag, DType::i32, {1});
    };
  };
  expect_refused("exp_avg short", build({"exp_avg", 3}), "step: list exp_avg has 3 tensors, grads has 4");
  expect_refused("params short", build({"params", 0}), "list params has 3 tensors, grads has 4");
  expect_refused("grads short", build({"grads", 2}), "has 4 tensors, grads has 3");
  expect_refused("params numel", build({"params", -1, 2}), "params[2] has 4 elements, grads[2] has 5");
  expect_refused("exp_avg_sq numel", build({"exp_avg_sq", -1, 1}), "exp_avg_sq[1] has 63 elements");
  expect_refused("exp_avg dtype", build({"exp_avg", -1, -1, 1}), "exp_avg[1] has dtype f16, expected f32");
  expect_refused("params dtype", build({"params", -1, -1, 0}), "params[0] has dtype f16, expected f32");
}

// Shapes may differ between the lists; only the element counts must match.
TEST(FusedAdam, ShapesMayDifferWhenElementCountsMatch) {
  Lists a(DType::bf16, {100, 48}), b = a;
  ASSERT_EQ(run(a, Hyper{}), 0);
  ASSERT_EQ(run(b, Hyper{}, nullptr,
                [](opf::CallBuilder& cb, Lists& L) {
                  for (size_t k = 0; k < L.sizes.size(); ++k) {
                    const int64_t n = L.sizes[k];
                    cb.add("grads", L.g[k].data(), L.dt, {n});
                    cb.add("params", L.p[k].data(), L.dt, {4, n / 4});
                    cb.add("exp_avg", L.m[k].data(), DType::f32, {2, 2, n / 4});
                    cb.add("exp_avg_sq", L.v[k].data(), DType::f32, {n, 1});
                  }
                  cb.add("noop_flag", &L.flag, DType::i32, {1});
                }),
            0);
  EXPECT_TRUE(a.state() == b.state());
}

// With weight decay, AdamW adds wd*p to the update and leaves m, v as without decay; L2 adds
// wd*p to the gradient, so m and v change too.
TEST(FusedAdam, AdamWAndL2DecayDifferAsTheMathSays) {
  for (DType dt : kDtypes) {
    const Lists in(dt, {1, 33, 4099});
    Hyper none, adamw, l2;
    none.lr = adamw.lr = l2.lr = 1e-2;
    adamw.wd = l2.wd = 0.05;
    l2.adamw = false;
    Lists a = in, b = in, c = in;
    ASSERT_EQ(run(a, none), 0);
    ASSERT_EQ(run(b, adamw), 0);
    ASSERT_EQ(run(c, l2), 0);
    check_formula(b, in, adamw);
    check_formula(c, in, l2);
    int p_moved = 0, m_moved = 0;
    for (size_t k = 0; k < in.sizes.size(); ++k) {
      EXPECT_TRUE(a.m[k] == b.m[k] && a.v[k] == b.v[k]) << "AdamW decay changed the moments";
      for (int64_t i = 0; i < in.sizes[k]; ++i) {
        // AdamW: p moves by -lr*wd*p beyond the plain step (up to the rounding of p in T)
        const double shift = b.pv(k, i) - a.pv(k, i), want = -adamw.lr * adamw.wd * in.pv(k, i);
        const double rounding = 2 * opf::dtype_unit_roundoff(dt) * (std::fabs(a.pv(k, i)) + std::fabs(b.pv(k, i)));
        EXPECT_NEAR(shift, want, rounding + 1e-7 * std::fabs(want) + 1e-7) << k << "/" << i;
        p_moved += shift != 0;
        m_moved += c.m[k][size_t(i)] != a.m[k][size_t(i)];
      }
    }
    EXPECT_GT(p_moved, 0);
    EXPECT_GT(m_moved, 0) << "L2 decay must reach the moments";
  }
}

// Adam's first step from zero moments: with bias correction, m_hat = g and v_hat = g^2, so every
// element moves by lr*g/(|g| + eps) ~ lr*sign(g); without, by lr*0.1g/(sqrt(0.001)|g| + eps).
TEST(FusedAdam, BiasCorrectionOnTheFirstStep) {
  for (bool bc : {true, false}) {
    Lists L(DType::f32, {257});
    for (auto& m : L.m) std::fill(m.begin(), m.end(), 0.0f);
    for (auto& v : L.v) std::fill(v.begin(), v.end(), 0.0f);
    const Lists in = L;
    Hyper h;
    h.bias_correction = bc;
    ASSERT_EQ(run(L, h), 0);
    check_formula(L, in, h);
    for (int64_t i = 0; i < L.sizes[0]; ++i) {
      const double g = in.gv(0, i), step = in.pv(0, i) - L.pv(0, i);
      const double want =
          bc ? 1e-3 * g / (std::fabs(g) + 1e-8) : 1e-3 * 0.1 * g / (std::sqrt(0.001) * std::fabs(g) + 1e-8);
      EXPECT_NEAR(step, want, 1e-9 + 4e-7 * (std::fabs(in.pv(0, i)) + 1e-3)) << (bc ? "on " : "off ") << i;
    }
  }
}

// beta^1e6 underflows: the corrections are exactly 1, so the step equals bias_correction=false.
TEST(FusedAdam, HugeStepMakesTheCorrectionsOne) {
  for (DType dt : kDtypes) {
    Lists a(dt, {3, 1000}), b = a;
    Hyper on, off;
    on.step = off.step = 1000000;
    off.bias_correction = false;
    ASSERT_EQ(run(a, on), 0);
    ASSERT_EQ(run(b, off), 0);
    EXPECT_TRUE(a.state() == b.state()) << opf::dtype_name(dt);
  }
}

// Tasks group chunks of many tensors; the result must not depend on which thread ran which.
TEST(FusedAdam, ThreadCountsGiveTheSameBitsOnManySmallTensors) {
  std::vector<int64_t> sizes;
  std::mt19937_64 rng(kSeed);
  for (int k = 0; k < 300; ++k) sizes.push_back(1 + int64_t(rng() % 3000));
  sizes.push_back(3 * 65536 + 5);
  const Lists in(DType::bf16, sizes);
  Hyper h;
  h.wd = 0.01;
  h.step = 3;
  Lists one = in;
  ASSERT_EQ(run(one, h, nullptr, add_all, 1), 0);
  for (int threads : {2, 3, 4}) {
    Lists many = in;
    ASSERT_EQ(run(many, h, nullptr, add_all, threads), 0);
    EXPECT_TRUE(many.state() == one.state()) << threads << " threads";
  }
}

TEST(FusedAdam, UnknownEntryIsRefused) {
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
