// fused_lamb — what the registry sweep cannot state as "match the reference": the trust ratio's
// fallback branches (a tensor whose params are all zero, one whose update is all zero), the
// trust ratio applied only with weight decay or use_nvlamb, clipping on and off, NaN and inf
// gradients (flag set; inf zeroes every finite clipped gradient, NaN stays in its element or its
// tensor), a set flag on entry (LAMB runs anyway, as apex), empty lists and zero-element tensors,
// list/numel/dtype/contiguity errors (one line naming the list, nothing written), and thread
// counts on a list of many small tensors. Seeded inputs (seed printed). Every argument the kernel
// writes is inout: "nothing written" is checked bitwise against a snapshot, "every element
// updated" against the formula restated below (m and v are f32, so an element left alone cannot
// pass). Runs the module the loader gives this build (prebuilt, or JIT-compiled in mode=jit).
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
constexpr uint64_t kSeed = 20251201;
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Hyper {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-6;
  int64_t step = 1;
  double wd = 0.01, max_grad_norm = 1.0;
  bool bias_correction = true, adamw = true, grad_averaging = true, nvlamb = false;
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
  void set_p(size_t k, int64_t i, double x) { opf::store_element(dt, p[k].data(), i, x); }

  // Every byte the kernel may write (g, p, m, v, flag), for bitwise comparisons.
  std::vector<std::byte> state(bool with_flag = true) const {
    std::vector<std::byte> s;
    auto put = [&](const void* d, size_t n) {
      const auto* b = static_cast<const std::byte*>(d);
      s.insert(s.end(), b, b + n);
    };
    for (size_t k = 0; k < sizes.size(); ++k) {
      put(g[k].data(), g[k].size());
      put(p[k].data(), p[k].size());
      put(m[k].data(), m[k].size() * 4);
      put(v[k].data(), v[k].size() * 4);
    }
    if (with_flag) put(&flag, 4);
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
    return opf::Loader::instance().load(*opf::find_op("fused_lamb"), "cpu").info;
  }();
  return m;
}

// 0 on success; otherwise 1 and the one-line reason in *err.
int run(Lists& L, const Hyper& h, std::string* err = nullptr, const Build& build = add_all, int threads = 0) {
  try {
    opf::CallBuilder b(*opf::find_op("fused_lamb"), "step");
    b.param("lr", h.lr).param("beta1", h.beta1).param("beta2", h.beta2).param("eps", h.eps);
    b.param("step", double(h.step)).param("weight_decay", h.wd).param("max_grad_norm", h.max_grad_norm);
    b.param("bias_correction", h.bias_correction).param("adam_w_mode", h.adamw);
    b.param("grad_averaging", h.grad_averaging).param("use_nvlamb", h.nvlamb).threads(threads);
    build(b, L);
    b.run(module());
    return 0;
  } catch (const opf::Error& e) {
    if (err) *err = e.what();
    return 1;
  }
}

// ref.cpp's contract, stated again: f32 factors, double arithmetic. Returns the expected output
// lists (u in g, p, m, v); `in` is the input.
struct Expected {
  std::vector<std::vector<double>> u, p, m, v;
  std::vector<std::vector<double>> du_dm;  // rbc1 / (sqrt(v rbc2) + eps): m's error reaches u so
  std::vector<double> ratio;               // per tensor
  double rclip = 1;
};
Expected expect(const Lists& in, const Hyper& h) {
  const auto f = [](double x) { return double(float(x)); };
  const double b1 = f(h.beta1), b3 = h.grad_averaging ? f(1 - h.beta1) : 1, b2 = f(h.beta2), omb2 = f(1 - h.beta2),
               lr = f(h.lr), eps = f(h.eps), wd = f(h.wd), mgn = f(h.max_grad_norm);
  const double rbc1 = h.bias_correction ? f(1 / (1 - std::pow(h.beta1, double(h.step)))) : 1;
  const double rbc2 = h.bias_correction ? f(1 / (1 - std::pow(h.beta2, double(h.step)))) : 1;
  double g2 = 0;
  for (size_t k = 0; k < in.sizes.size(); ++k)
    for (int64_t i = 0; i < in.sizes[k]; ++i) g2 += in.gv(k, i) * in.gv(k, i);
  const double G = std::sqrt(g2);
  Expected e;
  e.rclip = G > mgn ? mgn / G : 1;
  for (size_t k = 0; k < in.sizes.size(); ++k) {
    const size_t n = size_t(in.sizes[k]);
    e.u.emplace_back(n), e.p.emplace_back(n), e.m.emplace_back(n), e.v.emplace_back(n), e.du_dm.emplace_back(n);
    double pn = 0, un = 0;
    for (size_t i = 0; i < n; ++i) {
      const double p = in.pv(k, int64_t(i));
      double g = in.gv(k, int64_t(i)) * e.rclip;
      if (!h.adamw) g += wd * p;
      const double m = e.m[k][i] = b1 * in.m[k][i] + b3 * g;
      const double v = e.v[k][i] = b2 * in.v[k][i] + omb2 * g * g;
      e.du_dm[k][i] = rbc1 / (std::sqrt(v * rbc2) + eps);
      double u = m * rbc1 / (std::sqrt(v * rbc2) + eps);
      if (h.adamw) u += wd * p;
      unsigned char buf[8];
      opf::store_element(in.dt, buf, 0, u);
      u = e.u[k][i] = opf::load_element(in.dt, buf, 0);
      pn += p * p;
      un += u * u;
    }
    pn = std::sqrt(pn), un = std::sqrt(un);
    const double ratio = (h.wd != 0 || h.nvlamb) && pn != 0 && un != 0 ? lr * (pn / un) : lr;
    e.ratio.push_back(ratio);
    for (size_t i = 0; i < n; ++i) e.p[k][i] = in.pv(k, int64_t(i)) - ratio * e.u[k][i];
  }
  return e;
}

bool close(double got, double want, double tol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= tol;
}

// Every element of `out` (the kernel's result from `in`) matches the contract. Tolerances: a few
// f32 roundings of each term (64 u_f32: the clip factor carries the f32 grad-norm sum), carried
// on (m's absolute error into u, which cancels when m does; u's into p through the ratio), the
// update's rounding to T (one ulp: the kernel's f32 u may round the other way), and p's rounding.
void check_formula(const Lists& out, const Lists& in, const Hyper& h) {
  const Expected e = expect(in, h);
  const double uf = 0x1p-24, ut = opf::dtype_unit_roundoff(out.dt);
  const double tiny = out.dt == DType::f16 ? 0x1p-24 : out.dt == DType::bf16 ? 0x1p-133 : 0x1p-149;
  int bad = 0;
  for (size_t k = 0; k < out.sizes.size(); ++k)
    for (int64_t i = 0; i < out.sizes[k] && bad < 5; ++i) {
      const size_t j = size_t(i);
      const double g = std::fabs(in.gv(k, i)), p0 = std::fabs(in.pv(k, i));
      const double tm = 64 * uf * (std::fabs(in.m[k][j]) + g + std::fabs(e.m[k][j]) + p0 * h.wd);
      const double tv = 64 * uf * (in.v[k][j] + (g + p0 * h.wd) * (g + p0 * h.wd));
      const double tu =
          2 * ut * std::fabs(e.u[k][j]) + 64 * uf * (std::fabs(e.u[k][j]) + h.wd * p0) + e.du_dm[k][j] * tm + tiny;
      const double tp = 2 * ut * std::fabs(e.p[k][j]) + 64 * uf * p0 + e.ratio[k] * tu + tiny;
      const double m = out.m[k][j], v = out.v[k][j], u = out.gv(k, i), p = out.pv(k, i);
      if (!close(m, e.m[k][j], tm) || !close(v, e.v[k][j], tv) || !close(u, e.u[k][j], tu) ||
          !close(p, e.p[k][j], tp)) {
        ++bad;
        ADD_FAILURE() << opf::dtype_name(out.dt) << " tensor " << k << " element " << i << ": p " << p << " want "
                      << e.p[k][j] << ", u " << u << " want " << e.u[k][j] << ", m " << m << " want " << e.m[k][j]
                      << ", v " << v << " want " << e.v[k][j];
      }
    }
}

const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

// Every bool, both decay modes, clipping on (max_grad_norm below G) and off, a late step.
TEST(FusedLamb, EveryModeMatchesTheFormula) {
  std::vector<Hyper> hs(8);
  hs[1].adamw = false;
  hs[2].grad_averaging = false;
  hs[3].bias_correction = false, hs[3].step = 10;
  hs[4].wd = 0;  // no trust ratio: ratio = lr, the fused two-pass path
  hs[5].wd = 0, hs[5].nvlamb = true;
  hs[6].max_grad_norm = 1e6, hs[6].lr = 0.05, hs[6].wd = 0.1, hs[6].adamw = false;  // no clipping
  hs[7].step = 1000, hs[7].beta1 = 0.5, hs[7].beta2 = 0.9, hs[7].eps = 1e-3, hs[7].nvlamb = true;
  for (DType dt : kDtypes)
    for (size_t c = 0; c < hs.size(); ++c) {
      SCOPED_TRACE("hyper set " + std::to_string(c));
      Lists L(dt, {1, 2, 31, 65536 + 17, 1000}, c);
      const Lists in = L;
      ASSERT_EQ(run(L, hs[c]), 0);
      EXPECT_EQ(L.flag, 0) << opf::dtype_name(dt);
      check_formula(L, in, hs[c]);
    }
}

// A tensor whose params are all 0 has ||p|| = 0: its ratio falls back to lr (without the
// fallback it would be 0 and the tensor would not move).
TEST(FusedLamb, ZeroParamNormFallsBackToLr) {
  for (DType dt : kDtypes) {
    Lists L(dt, {100, 37, 5000});
    for (int64_t i = 0; i < L.sizes[1]; ++i) L.set_p(1, i, 0.0);
    const Lists in = L;
    Hyper h;
    h.lr = 0.01;
    ASSERT_EQ(run(L, h), 0);
    check_formula(L, in, h);
    for (int64_t i = 0; i < L.sizes[1]; ++i) {
      ASSERT_NE(L.gv(1, i), 0.0) << i;
      const double want = -0.01 * L.gv(1, i);  // p = 0 - lr * u
      EXPECT_NEAR(L.pv(1, i), want, 2 * opf::dtype_unit_roundoff(dt) * std::fabs(want) + 1e-9) << i;
    }
  }
}

// A tensor whose update is all 0 (zero gradient and moment, no decay, use_nvlamb) has ||u|| = 0:
// its ratio falls back to lr and its params stay bitwise (without the fallback lr*||p||/0 = inf
// and inf * 0 = NaN). A tensor with params, gradient and moment all 0 keeps 0 even with decay.
TEST(FusedLamb, ZeroUpdateNormLeavesParamsUnchanged) {
  for (DType dt : kDtypes)
    for (double wd : {0.0, 0.05}) {
      Lists L(dt, {100, 37, 5000});
      for (int64_t i = 0; i < L.sizes[1]; ++i) {
        L.set_g(1, i, 0.0);
        L.m[1][size_t(i)] = 0;
        if (wd != 0) L.set_p(1, i, 0.0);
      }
      const Lists in = L;
      Hyper h;
      h.wd = wd;
      h.nvlamb = true;
      ASSERT_EQ(run(L, h), 0);
      check_formula(L, in, h);
      const size_t e = opf::dtype_size(dt);
      EXPECT_EQ(0, std::memcmp(L.p[1].data(), in.p[1].data(), size_t(L.sizes[1]) * e)) << "wd " << wd;
      for (int64_t i = 0; i < L.sizes[1]; ++i) ASSERT_EQ(L.gv(1, i), 0.0) << i;
      EXPECT_NE(0, std::memcmp(L.p[2].data(), in.p[2].data(), size_t(L.sizes[2]) * e)) << "the other tensors move";
    }
}

// The trust ratio changes the step only with weight decay or use_nvlamb: wd = 0 without nvlamb
// moves every tensor by lr*u, with nvlamb by lr*||p||/||u||*u (here far larger than lr*u).
TEST(FusedLamb, TrustRatioOnlyWithDecayOrNvlamb) {
  for (DType dt : kDtypes) {
    const Lists in(dt, {4099, 300});
    Hyper plain, nv;
    plain.wd = nv.wd = 0;
    nv.nvlamb = true;
    Lists a = in, b = in;
    ASSERT_EQ(run(a, plain), 0);
    ASSERT_EQ(run(b, nv), 0);
    check_formula(a, in, plain);
    check_formula(b, in, nv);
    EXPECT_TRUE(a.g == b.g && a.m == b.m && a.v == b.v) << "stage 1 does not depend on the ratio";
    double step_a = 0, step_b = 0;
    for (int64_t i = 0; i < in.sizes[0]; ++i) {
      step_a += std::fabs(a.pv(0, i) - in.pv(0, i));
      step_b += std::fabs(b.pv(0, i) - in.pv(0, i));
    }
    EXPECT_GT(step_b, 2 * step_a) << opf::dtype_name(dt);
  }
}

// An inf gradient: G = inf, every finite gradient clips to 0 and the inf one to NaN; with the
// trust ratio that tensor's ||u|| is NaN and all its params become NaN; the others stay finite.
// A NaN gradient: G = NaN, no clipping, NaN in that element (and, with the ratio, its tensor).
// Either way the flag is set, and a second call runs again (LAMB ignores the flag).
TEST(FusedLamb, NonFiniteGradientSetsTheFlagAndPropagates) {
  for (DType dt : kDtypes)
    for (double bad_value : {kInf, -kInf, std::nan("")})
      for (bool trust : {true, false}) {
        SCOPED_TRACE(std::string(opf::dtype_name(dt)) + " g " + std::to_string(bad_value) + (trust ? " trust" : ""));
        Lists L(dt, {5, 100, 37});
        L.set_g(1, 17, bad_value);
        const Lists in = L;
        Hyper h;
        h.wd = trust ? 0.02 : 0;
        ASSERT_EQ(run(L, h), 0);
        EXPECT_EQ(L.flag, 1);
        check_formula(L, in, h);
        EXPECT_TRUE(std::isnan(L.m[1][17]) && std::isnan(L.v[1][17]));  // inf * 0 or NaN
        EXPECT_TRUE(std::isnan(L.gv(1, 17)) && std::isnan(L.pv(1, 17)));
        for (size_t k : {size_t(0), size_t(2)})
          for (int64_t i = 0; i < L.sizes[k]; ++i) EXPECT_TRUE(std::isfinite(L.pv(k, i))) << k << "/" << i;
        const bool whole_tensor = trust;
        EXPECT_EQ(std::isnan(L.pv(1, 3)), whole_tensor);
        if (std::isinf(bad_value)) {  // finite gradients clipped to 0: m = b1*m exactly
          EXPECT_EQ(L.m[0][2], float(0.9f * in.m[0][2]));
        }
        const auto before = L.state();
        ASSERT_EQ(run(L, h), 0);
        EXPECT_FALSE(L.state() == before) << "the set flag must not skip LAMB";
      }
}

// A set flag on entry does not skip the step, is left set, and changes nothing else.
TEST(FusedLamb, SetFlagOnEntryStillSteps) {
  for (DType dt : kDtypes)
    for (int32_t flag : {1, -1, 7}) {
      Lists a(dt, {1, 17, 4099, 70000}), b = a;
      b.flag = flag;
      ASSERT_EQ(run(a, Hyper{}), 0);
      ASSERT_EQ(run(b, Hyper{}), 0);
      EXPECT_EQ(b.flag, flag);
      EXPECT_TRUE(a.state(false) == b.state(false)) << opf::dtype_name(dt) << ", flag " << flag;
    }
}

TEST(FusedLamb, EmptyListsAreANoOp) {
  for (int32_t flag : {0, 1}) {
    Lists L(DType::f32, {});
    L.flag = flag;
    std::string err;
    ASSERT_EQ(run(L, Hyper{}, &err), 0) << err;
    EXPECT_EQ(L.flag, flag);
  }
}

// A zero-element tensor in a list: its norms are 0, nothing to update, the others as usual.
TEST(FusedLamb, ZeroElementTensorsAreAllowed) {
  Lists L(DType::f32, {33, 0, 1, 0});
  const Lists in = L;
  ASSERT_EQ(run(L, Hyper{}), 0);
  check_formula(L, in, Hyper{});
  EXPECT_NE(L.pv(0, 0), in.pv(0, 0));
}

// A malformed call fails with one line naming the list (and index), and writes nothing.
void expect_refused(const char* what, const Build& build, const std::string& needle, Hyper h = {}) {
  Lists L(DType::f32, {3, 64, 5, 9});
  const auto before = L.state();
  std::string err;
  EXPECT_NE(run(L, h, &err, build), 0) << what;
  EXPECT_NE(err.find(needle), std::string::npos) << what << ": " << err;
  EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  EXPECT_TRUE(L.state() == before) << what << ": written despite the error";
}

TEST(FusedLamb, MalformedCallsAreRefusedNamingTheArgument) {
  // lists built by hand: `skip` leaves out element k of a list, `numel`/`dtype`/`stride` change one
  struct Tweak {
    const char* list;
    int skip = -1, numel = -1, dtype = -1, stride = -1;
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
          if (mine && t.stride == int(k)) {  // every other element of the first half: a view
            b.add(names[a], data[a], dts[a], {n / 2}, {2});
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
  expect_refused("strided params", build({"params", -1, -1, -1, 1}), "params");
  expect_refused("strided params", build({"params", -1, -1, -1, 1}), "not contiguous");
  Hyper zero_clip;
  zero_clip.max_grad_norm = 0;
  expect_refused("max_grad_norm 0", add_all, "max_grad_norm", zero_clip);
}

// Shapes may differ between the lists; only the element counts must match.
TEST(FusedLamb, ShapesMayDifferWhenElementCountsMatch) {
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

// Tasks group chunks of many tensors and the norms are summed per chunk: the result must not
// depend on which thread ran which, with and without the trust ratio.
TEST(FusedLamb, ThreadCountsGiveTheSameBitsOnManySmallTensors) {
  std::vector<int64_t> sizes;
  std::mt19937_64 rng(kSeed);
  for (int k = 0; k < 300; ++k) sizes.push_back(1 + int64_t(rng() % 3000));
  sizes.push_back(3 * 65536 + 5);
  for (DType dt : {DType::bf16, DType::f32})
    for (double wd : {0.0, 0.01}) {
      const Lists in(dt, sizes);
      Hyper h;
      h.wd = wd;
      h.step = 3;
      Lists one = in;
      ASSERT_EQ(run(one, h, nullptr, add_all, 1), 0);
      for (int threads : {2, 3, 4}) {
        Lists many = in;
        ASSERT_EQ(run(many, h, nullptr, add_all, threads), 0);
        EXPECT_TRUE(many.state() == one.state()) << threads << " threads, wd " << wd;
      }
    }
}

TEST(FusedLamb, UnknownEntryIsRefused) {
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
