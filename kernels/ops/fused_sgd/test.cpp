// fused_sgd — what the registry sweep cannot state as "match the reference": the noop flag on
// entry (nothing written, bitwise), a non-finite gradient (propagates into its own element only,
// flag left alone), momentum 0 (the buffer is not touched), first_run (the buffer becomes the
// gradient), nesterov, weight decay before vs after momentum, scale, empty lists, list/numel/dtype
// mismatches (one line naming the list, nothing written), one-element and prime-sized tensors,
// thread counts on a list of many small tensors (the suite's threads.* test runs one tensor), and
// step_with_copy against step on f32 params.
// Seeded inputs (seed printed). Every argument step writes is inout, so there is nothing to
// poison: "nothing written" is checked bitwise against a snapshot, "every element updated" against
// the formula (the buffer is f32, so an element left alone cannot pass); step_with_copy's
// model_copy (an out list) is poisoned with NaN. Runs the module the loader
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
constexpr uint64_t kSeed = 20251201;

struct Hyper {
  double lr = 1e-2, momentum = 0.9, dampening = 0;
  bool nesterov = false;
  double wd = 0;
  bool wd_after = false, first_run = false;
  double scale = 1;
};

// Three lists of `sizes.size()` tensors, g and p in dtype dt, the buffer in f32, and the flag.
struct Lists {
  DType dt;
  std::vector<int64_t> sizes;
  std::vector<std::vector<std::byte>> g, p;
  std::vector<std::vector<float>> b;
  int32_t flag = 0;

  Lists(DType dt_, std::vector<int64_t> sizes_, uint64_t salt = 0) : dt(dt_), sizes(std::move(sizes_)) {
    std::mt19937_64 rng(kSeed + salt);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    auto draw = [&](double lo, double hi) {
      for (;;) {  // never a zero: it hides scaling bugs
        const double x = lo + (hi - lo) * u(rng);
        if (x != 0) return x;
      }
    };
    const size_t e = opf::dtype_size(dt);
    for (int64_t n : sizes) {
      g.emplace_back(size_t(n) * e);
      p.emplace_back(size_t(n) * e);
      b.emplace_back(size_t(n));
      for (int64_t i = 0; i < n; ++i) {
        opf::store_element(dt, g.back().data(), i, draw(-1, 1));
        opf::store_element(dt, p.back().data(), i, draw(-1, 1));
        b.back()[size_t(i)] = float(draw(-0.5, 0.5));
      }
    }
  }
  double gv(size_t k, int64_t i) const { return opf::load_element(dt, g[k].data(), i); }
  double pv(size_t k, int64_t i) const { return opf::load_element(dt, p[k].data(), i); }
  void set_g(size_t k, int64_t i, double x) { opf::store_element(dt, g[k].data(), i, x); }

  // Every byte the kernel may write (p, buffer, flag), for bitwise comparisons.
  std::vector<std::byte> state() const {
    std::vector<std::byte> s;
    auto put = [&](const void* d, size_t n) {
      const auto* bytes = static_cast<const std::byte*>(d);
      s.insert(s.end(), bytes, bytes + n);
    };
    for (size_t k = 0; k < sizes.size(); ++k) {
      put(p[k].data(), p[k].size());
      put(b[k].data(), b[k].size() * 4);
    }
    put(&flag, 4);
    return s;
  }
};

using Build = std::function<void(opf::CallBuilder&, Lists&)>;

void add_all(opf::CallBuilder& cb, Lists& L) {
  for (const char* name : {"grads", "params", "momentum_buffer"}) cb.empty_list(name);
  for (size_t k = 0; k < L.sizes.size(); ++k) {
    const opf::Shape s{L.sizes[k]};
    cb.add("grads", L.g[k].data(), L.dt, s);
    cb.add("params", L.p[k].data(), L.dt, s);
    cb.add("momentum_buffer", L.b[k].data(), DType::f32, s);
  }
  cb.add("noop_flag", &L.flag, DType::i32, {1});
}

const opf_module_info* module() {
  static const opf_module_info* m = [] {
    std::printf("seed %llu\n", (unsigned long long)kSeed);
    return opf::Loader::instance().load(*opf::find_op("fused_sgd"), "cpu").info;
  }();
  return m;
}

// 0 on success; otherwise 1 and the one-line reason in *err.
int run(Lists& L, const Hyper& h, std::string* err = nullptr, const Build& build = add_all, int threads = 0) {
  try {
    opf::CallBuilder cb(*opf::find_op("fused_sgd"), "step");
    cb.param("lr", h.lr).param("momentum", h.momentum).param("dampening", h.dampening).param("nesterov", h.nesterov);
    cb.param("weight_decay", h.wd).param("wd_after_momentum", h.wd_after).param("first_run", h.first_run);
    cb.param("scale", h.scale).threads(threads);
    build(cb, L);
    cb.run(module());
    return 0;
  } catch (const opf::Error& e) {
    if (err) *err = e.what();
    return 1;
  }
}

// ref.cpp's contract, stated again: f32 factors, double arithmetic, with a bound for the f32
// roundings of the kernel (a few per term) and the final rounding to T.
struct Expect {
  double p, b, tol_p, tol_b;
};
Expect expect(const Hyper& h, const Lists& in, size_t k, int64_t i) {
  const auto f = [](double x) { return double(float(x)); };
  const double lr = f(h.lr), mu = f(h.momentum), omd = f(1 - h.dampening), wd = f(h.wd), scale = f(h.scale);
  const double p = in.pv(k, i), b0 = in.b[k][size_t(i)];
  double g = in.gv(k, i) * scale, mag = std::fabs(g);  // mag: a bound on the terms summed so far
  if (wd != 0 && !h.wd_after) g += wd * p, mag += wd * std::fabs(p);
  double b = b0, bmag = std::fabs(b0);
  if (mu != 0) {
    b = h.first_run ? g : mu * b0 + omd * g;
    bmag = h.first_run ? mag : mu * std::fabs(b0) + omd * mag;
    if (h.nesterov) {
      g += mu * b, mag += mu * bmag;
    } else {
      g = b, mag = bmag;
    }
  }
  if (wd != 0 && h.wd_after) g += wd * p, mag += wd * std::fabs(p);
  const double uf = 0x1p-24, ut = opf::dtype_unit_roundoff(in.dt);
  const double tiny = in.dt == DType::f16 ? 0x1p-24 : in.dt == DType::bf16 ? 0x1p-133 : 0x1p-149;
  Expect e{p - lr * g, b, 0, 8 * uf * bmag};
  e.tol_p = 2 * ut * std::fabs(e.p) + 16 * uf * (std::fabs(p) + lr * mag) + tiny;
  return e;
}

// Every element of `out` (the kernel's result from `in`) matches the contract; with momentum 0 the
// buffer must be bitwise what it was.
void check_formula(const Lists& out, const Lists& in, const Hyper& h) {
  int bad = 0;
  for (size_t k = 0; k < out.sizes.size(); ++k)
    for (int64_t i = 0; i < out.sizes[k] && bad < 5; ++i) {
      const Expect e = expect(h, in, k, i);
      const double p = out.pv(k, i), b = out.b[k][size_t(i)];
      const bool b_ok = h.momentum == 0 ? std::memcmp(&out.b[k][size_t(i)], &in.b[k][size_t(i)], 4) == 0
                                        : std::fabs(b - e.b) <= e.tol_b;
      if (std::fabs(p - e.p) > e.tol_p || !b_ok) {
        ++bad;
        ADD_FAILURE() << "tensor " << k << " element " << i << ": p " << p << " want " << e.p << ", buffer " << b
                      << " want " << e.b;
      }
    }
}

const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

TEST(FusedSgd, NoopFlagOnEntrySkipsTheStepBitwise) {
  for (DType dt : kDtypes)
    for (int32_t flag : {1, -1, 7}) {
      Lists L(dt, {1, 17, 4099, 70000});
      L.flag = flag;
      const auto before = L.state();
      Hyper h;
      h.wd = 0.01;
      ASSERT_EQ(run(L, h), 0);
      EXPECT_TRUE(L.state() == before) << opf::dtype_name(dt) << ", flag " << flag << ": the step wrote something";
    }
}

// Every combination of the options, on a list of one-element, prime, chunk-straddling and
// vector-odd sizes, against the formula.
TEST(FusedSgd, EveryOptionCombinationFollowsTheFormula) {
  for (DType dt : kDtypes)
    for (int mask = 0; mask < 32; ++mask) {
      Hyper h;
      h.momentum = mask & 1 ? 0.9 : 0.0;
      h.nesterov = mask & 2;
      h.wd = mask & 4 ? 0.03 : 0.0;
      h.wd_after = mask & 8;
      h.first_run = mask & 16;
      h.dampening = 0.25;
      h.scale = 0.125 * 3;
      h.lr = 0.05;
      Lists L(dt, {1, 2, 31, 65536 + 17, 1000}, uint64_t(mask));
      const Lists in = L;
      ASSERT_EQ(run(L, h), 0);
      SCOPED_TRACE(std::string(opf::dtype_name(dt)) + " mask " + std::to_string(mask));
      EXPECT_EQ(L.flag, 0);
      check_formula(L, in, h);
    }
}

// The options change the result the way the math says, not only "some way".
TEST(FusedSgd, OptionsHaveTheirDocumentedEffect) {
  const Lists in(DType::f32, {257, 3});
  auto result = [&](Hyper h) {
    Lists L = in;
    EXPECT_EQ(run(L, h), 0);
    return L;
  };
  Hyper base;
  base.lr = 0.1;
  // first_run: the buffer becomes the (scaled) gradient, whatever it held
  Hyper first = base;
  first.first_run = true;
  first.scale = 0.5;
  const Lists a = result(first);
  for (int64_t i = 0; i < 257; ++i) EXPECT_EQ(a.b[0][size_t(i)], float(0.5 * in.gv(0, i))) << i;
  // dampening 1 without first_run: the buffer only decays, b = mu*b
  Hyper damp = base;
  damp.dampening = 1.0;
  const Lists c = result(damp);
  for (int64_t i = 0; i < 257; ++i) EXPECT_EQ(c.b[0][size_t(i)], float(0.9f * in.b[0][size_t(i)])) << i;
  // momentum 0: plain SGD, p - lr*g, buffer untouched
  Hyper plain = base;
  plain.momentum = 0;
  plain.nesterov = true;  // no effect without momentum
  const Lists d = result(plain);
  EXPECT_TRUE(d.b == in.b);
  for (int64_t i = 0; i < 257; ++i) {  // p - lr*g: one rounding where the CPU has FMA, else two
    const float g = float(in.gv(0, i)), p = float(in.pv(0, i)), got = float(d.pv(0, i));
    EXPECT_TRUE(got == std::fma(-0.1f, g, p) || got == p - 0.1f * g) << i << ": " << got;
  }
  // weight decay before momentum reaches the buffer; after momentum it does not
  Hyper before = base, after = base;
  before.wd = after.wd = 0.05;
  after.wd_after = true;
  const Lists nb = result(base), wb = result(before), wa = result(after);
  EXPECT_TRUE(wa.b == nb.b) << "decay after momentum changed the buffer";
  int moved = 0;
  for (int64_t i = 0; i < 257; ++i) moved += wb.b[0][size_t(i)] != nb.b[0][size_t(i)];
  EXPECT_GT(moved, 200) << "decay before momentum must reach the buffer";
  // nesterov: the step is g + mu*b instead of b; the buffer is the same
  Hyper nest = base;
  nest.nesterov = true;
  const Lists n = result(nest);
  EXPECT_TRUE(n.b == nb.b);
  int differs = 0;
  for (int64_t i = 0; i < 257; ++i) differs += n.pv(0, i) != nb.pv(0, i);
  EXPECT_GT(differs, 200);
}

// A NaN or inf gradient: that element's buffer and param become non-finite, every other element
// is bitwise as in a run where that gradient was finite, and the flag stays 0 (SGD only reads it).
TEST(FusedSgd, NonFiniteGradientStaysInItsElementAndLeavesTheFlag) {
  for (DType dt : kDtypes) {
    Lists bad(dt, {5, 100, 37}), clean = bad;
    bad.set_g(1, 17, std::numeric_limits<double>::infinity());
    bad.set_g(2, 3, std::nan(""));
    Hyper h;
    h.wd = 0.02;
    ASSERT_EQ(run(bad, h), 0);
    ASSERT_EQ(run(clean, h), 0);
    EXPECT_EQ(bad.flag, 0) << opf::dtype_name(dt);
    EXPECT_EQ(bad.b[1][17], std::numeric_limits<float>::infinity());
    EXPECT_EQ(bad.pv(1, 17), -std::numeric_limits<double>::infinity());
    EXPECT_TRUE(std::isnan(bad.b[2][3]) && std::isnan(bad.pv(2, 3)));
    const size_t e = opf::dtype_size(dt);
    for (size_t k = 0; k < bad.sizes.size(); ++k)
      for (int64_t i = 0; i < bad.sizes[k]; ++i) {
        if ((k == 1 && i == 17) || (k == 2 && i == 3)) continue;
        EXPECT_EQ(0, std::memcmp(&bad.p[k][size_t(i) * e], &clean.p[k][size_t(i) * e], e)) << k << "/" << i;
        EXPECT_EQ(0, std::memcmp(&bad.b[k][size_t(i)], &clean.b[k][size_t(i)], 4)) << k << "/" << i;
      }
  }
}

TEST(FusedSgd, EmptyListsAreANoOp) {
  for (int32_t flag : {0, 1}) {
    Lists L(DType::f32, {});
    L.flag = flag;
    std::string err;
    ASSERT_EQ(run(L, Hyper{}, &err), 0) << err;
    EXPECT_EQ(L.flag, flag);
  }
}

TEST(FusedSgd, EmptyTensorsInAListAreSkipped) {
  Lists L(DType::bf16, {0, 5, 0}), in = L;
  ASSERT_EQ(run(L, Hyper{}), 0);
  check_formula(L, in, Hyper{});
}

// A malformed call fails with one line naming the list (and index), and writes nothing.
void expect_refused(const char* what, const Build& build, const std::string& needle, const Hyper& h = {}) {
  Lists L(DType::f32, {3, 64, 5, 9});
  const auto before = L.state();
  std::string err;
  EXPECT_NE(run(L, h, &err, build), 0) << what;
  EXPECT_NE(err.find(needle), std::string::npos) << what << ": " << err;
  EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  EXPECT_TRUE(L.state() == before) << what << ": written despite the error";
}

TEST(FusedSgd, MismatchedListsAreRefusedNamingTheList) {
  struct Tweak {
    const char* list;
    int skip = -1, numel = -1, dtype = -1;
  };
  auto build = [](Tweak t) {
    return [t](opf::CallBuilder& cb, Lists& L) {
      static std::vector<uint16_t> f16_buf(64);
      for (const char* name : {"grads", "params", "momentum_buffer"}) cb.empty_list(name);
      for (size_t k = 0; k < L.sizes.size(); ++k) {
        const std::string_view names[] = {"grads", "params", "momentum_buffer"};
        void* data[] = {L.g[k].data(), L.p[k].data(), L.b[k].data()};
        const DType dts[] = {L.dt, L.dt, DType::f32};
        for (int a = 0; a < 3; ++a) {
          const bool mine = names[a] == t.list;
          if (mine && t.skip == int(k)) continue;
          int64_t n = L.sizes[k];
          if (mine && t.numel == int(k)) n -= 1;
          if (mine && t.dtype == int(k)) {
            cb.add(names[a], f16_buf.data(), DType::f16, {n});
            continue;
          }
          cb.add(names[a], data[a], dts[a], {n});
        }
      }
      cb.add("noop_flag", &L.flag, DType::i32, {1});
    };
  };
  expect_refused("buffer short", build({"momentum_buffer", 3}),
                 "step: list momentum_buffer has 3 tensors, grads has 4");
  expect_refused("params short", build({"params", 0}), "list params has 3 tensors, grads has 4");
  expect_refused("grads short", build({"grads", 2}), "has 4 tensors, grads has 3");
  expect_refused("params numel", build({"params", -1, 2}), "params[2] has 4 elements, grads[2] has 5");
  expect_refused("buffer numel", build({"momentum_buffer", -1, 1}), "momentum_buffer[1] has 63 elements");
  expect_refused("buffer dtype", build({"momentum_buffer", -1, -1, 1}),
                 "momentum_buffer[1] has dtype f16, expected f32");
  expect_refused("params dtype", build({"params", -1, -1, 0}), "params[0] has dtype f16, expected f32");
  expect_refused("grads dtype", build({"grads", -1, -1, 3}), "grads[3] has dtype f16, expected f32");
  // even without momentum (the buffer is not used) a malformed buffer list is an error
  Hyper plain;
  plain.momentum = 0;
  expect_refused("buffer short, no momentum", build({"momentum_buffer", 1}), "list momentum_buffer has 3 tensors",
                 plain);
}

TEST(FusedSgd, BadFlagAndParamsAreRefused) {
  expect_refused(
      "flag dtype",
      [](opf::CallBuilder& cb, Lists& L) {
        static int64_t wide = 0;
        for (size_t k = 0; k < L.sizes.size(); ++k) {
          cb.add("grads", L.g[k].data(), L.dt, {L.sizes[k]});
          cb.add("params", L.p[k].data(), L.dt, {L.sizes[k]});
          cb.add("momentum_buffer", L.b[k].data(), DType::f32, {L.sizes[k]});
        }
        cb.add("noop_flag", &wide, DType::i64, {1});
      },
      "noop_flag");
  Hyper h;
  h.dampening = 1.5;
  expect_refused("dampening", add_all, "dampening", h);
  h = Hyper{};
  h.lr = -1;
  expect_refused("lr", add_all, "lr", h);
  h = Hyper{};
  h.scale = 0;
  expect_refused("scale", add_all, "scale", h);
}

// Shapes may differ between the lists; only the element counts must match.
TEST(FusedSgd, ShapesMayDifferWhenElementCountsMatch) {
  Lists a(DType::f16, {100, 48}), b = a;
  ASSERT_EQ(run(a, Hyper{}), 0);
  ASSERT_EQ(run(b, Hyper{}, nullptr,
                [](opf::CallBuilder& cb, Lists& L) {
                  for (size_t k = 0; k < L.sizes.size(); ++k) {
                    const int64_t n = L.sizes[k];
                    cb.add("grads", L.g[k].data(), L.dt, {n});
                    cb.add("params", L.p[k].data(), L.dt, {4, n / 4});
                    cb.add("momentum_buffer", L.b[k].data(), DType::f32, {2, 2, n / 4});
                  }
                  cb.add("noop_flag", &L.flag, DType::i32, {1});
                }),
            0);
  EXPECT_TRUE(a.state() == b.state());
}

// Tasks group chunks of many tensors; the result must not depend on which thread ran which.
TEST(FusedSgd, ThreadCountsGiveTheSameBitsOnManySmallTensors) {
  std::vector<int64_t> sizes;
  std::mt19937_64 rng(kSeed);
  for (int k = 0; k < 300; ++k) sizes.push_back(1 + int64_t(rng() % 3000));
  sizes.push_back(3 * 65536 + 5);
  for (DType dt : kDtypes) {
    const Lists in(dt, sizes);
    Hyper h;
    h.wd = 0.01;
    h.nesterov = true;
    Lists one = in;
    ASSERT_EQ(run(one, h, nullptr, add_all, 1), 0);
    for (int threads : {2, 3, 4}) {
      Lists many = in;
      ASSERT_EQ(run(many, h, nullptr, add_all, threads), 0);
      EXPECT_TRUE(many.state() == one.state()) << opf::dtype_name(dt) << ", " << threads << " threads";
    }
  }
}

// step_with_copy (apex's 4-list form): f32 master params updated exactly as `step` updates f32
// params from the same (widened) gradients, and model_copy = the new p rounded to the grads' dtype;
// a model_copy list of the wrong dtype or length is refused naming it.
TEST(FusedSgd, StepWithCopyIsStepOnF32MastersPlusARoundedCopy) {
  for (DType dt : kDtypes) {
    Lists L(dt, {1, 33, 65536 + 9}, 3);
    Lists ref(DType::f32, L.sizes, 3);  // the same step on f32 params and the widened gradients
    std::vector<std::vector<float>> master(L.sizes.size()), buf = L.b;
    std::vector<std::vector<std::byte>> copy(L.sizes.size());
    for (size_t k = 0; k < L.sizes.size(); ++k) {
      master[k].resize(size_t(L.sizes[k]));
      copy[k].resize(size_t(L.sizes[k]) * opf::dtype_size(dt));
      for (int64_t i = 0; i < L.sizes[k]; ++i) {
        master[k][size_t(i)] = float(ref.pv(k, i));
        opf::store_element(DType::f32, ref.g[k].data(), i, L.gv(k, i));
        opf::store_element(dt, copy[k].data(), i, std::nan(""));
      }
      ref.b[k] = L.b[k];
    }
    Hyper h;
    h.wd = 0.02;
    h.nesterov = true;
    h.scale = 0.25;
    ASSERT_EQ(run(ref, h), 0);
    auto with_copy = [&](DType copy_dt, size_t copies, std::string* err) {
      try {
        opf::CallBuilder cb(*opf::find_op("fused_sgd"), "step_with_copy");
        cb.param("lr", h.lr).param("momentum", h.momentum).param("nesterov", h.nesterov).param("weight_decay", h.wd);
        cb.param("scale", h.scale);
        for (const char* name : {"grads", "params", "momentum_buffer", "model_copy"}) cb.empty_list(name);
        for (size_t k = 0; k < L.sizes.size(); ++k) {
          const opf::Shape s{L.sizes[k]};
          cb.add("grads", L.g[k].data(), dt, s).add("params", master[k].data(), DType::f32, s);
          cb.add("momentum_buffer", buf[k].data(), DType::f32, s);
          if (k < copies) cb.add("model_copy", copy[k].data(), copy_dt, s);
        }
        cb.add("noop_flag", &L.flag, DType::i32, {1});
        cb.run(module());
        return 0;
      } catch (const opf::Error& e) {
        if (err) *err = e.what();
        return 1;
      }
    };
    std::string err;
    const DType other = dt == DType::f16 ? DType::bf16 : DType::f16;
    EXPECT_NE(with_copy(other, L.sizes.size(), &err), 0);
    EXPECT_NE(err.find("model_copy[0] has dtype " + std::string(opf::dtype_name(other))), std::string::npos) << err;
    EXPECT_NE(with_copy(dt, 2, &err), 0);
    EXPECT_NE(err.find("list model_copy has 2 tensors, grads has 3"), std::string::npos) << err;
    EXPECT_TRUE(buf == L.b) << "written despite the error";
    ASSERT_EQ(with_copy(dt, L.sizes.size(), &err), 0) << err;
    for (size_t k = 0; k < L.sizes.size(); ++k) {
      EXPECT_TRUE(buf[k] == ref.b[k]) << opf::dtype_name(dt) << " buffer " << k;
      for (int64_t i = 0; i < L.sizes[k]; ++i) {
        const double p = ref.pv(k, i);
        ASSERT_EQ(double(master[k][size_t(i)]), p) << opf::dtype_name(dt) << " " << k << "/" << i;
        std::byte want[8];  // room for any dtype: GCC's -Warray-bounds cannot see dt is 2 or 4 bytes
        opf::store_element(dt, want, 0, p);
        ASSERT_EQ(0, std::memcmp(want, &copy[k][size_t(i) * opf::dtype_size(dt)], opf::dtype_size(dt)))
            << k << "/" << i;
      }
    }
  }
}

TEST(FusedSgd, UnknownEntryIsRefused) {
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
