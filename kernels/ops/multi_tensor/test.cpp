// multi_tensor — what the registry sweep cannot state: scale/axpby into another output dtype and
// in place, each arg_to_check value against a non-finite x or y, the flag never reset, l2norm's
// f32 overflow (flag, inf norms only where the overflow is), per_tensor off ([0] output), empty
// lists, lists of many tensors of mixed sizes (1 .. 3 million elements, across chunk boundaries),
// list/numel/dtype mismatches and overlaps (one line naming the list, nothing written), a strided
// view (refused: the op takes dense tensors), and thread counts on many small tensors (the suite's
// threads.* test runs one large tensor).
// Seeded inputs (seed printed); outputs are poisoned (NaN) before each run and every element is
// checked against float64 arithmetic. Runs the module the loader gives this build (prebuilt, or
// JIT-compiled in mode=jit), through the ABI.
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
constexpr uint64_t kSeed = 20261201;
const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};
const double kNaN = std::numeric_limits<double>::quiet_NaN(), kInf = std::numeric_limits<double>::infinity();

// One list of tensors in one dtype.
struct List {
  DType dt;
  std::vector<int64_t> sizes;
  std::vector<std::vector<std::byte>> data;

  List(DType dt_, std::vector<int64_t> sizes_) : dt(dt_), sizes(std::move(sizes_)) {
    for (int64_t n : sizes) data.emplace_back(size_t(n) * opf::dtype_size(dt));
  }
  // Uniform in [lo, hi), never zero as stored.
  List& fill(uint64_t salt, double lo = -1, double hi = 1) {
    std::mt19937_64 rng(kSeed + salt);
    std::uniform_real_distribution<double> u(lo, hi);
    for (size_t k = 0; k < sizes.size(); ++k)
      for (int64_t i = 0; i < sizes[k]; ++i) {
        double v = u(rng);
        set(k, i, v);
        if (at(k, i) == 0) set(k, i, hi * 0.5);
      }
    return *this;
  }
  List& poison() {
    for (size_t k = 0; k < sizes.size(); ++k)
      for (int64_t i = 0; i < sizes[k]; ++i) set(k, i, kNaN);
    return *this;
  }
  double at(size_t k, int64_t i) const { return opf::load_element(dt, data[k].data(), i); }
  void set(size_t k, int64_t i, double v) { opf::store_element(dt, data[k].data(), i, v); }
  void add_to(opf::CallBuilder& b, const char* name) {
    b.empty_list(name);
    for (size_t k = 0; k < sizes.size(); ++k) b.add(name, data[k].data(), dt, {sizes[k]});
  }
  bool same_bits(const List& o) const { return data == o.data; }
};

const opf_module_info* module() {
  static const opf_module_info* m = [] {
    std::printf("seed %llu\n", (unsigned long long)kSeed);
    return opf::Loader::instance().load(*opf::find_op("multi_tensor"), "cpu").info;
  }();
  return m;
}

struct Params {
  double scale = 0.3, a = 0.75, b = -1.25;
  int check = -1;  // apex arg_to_check
  bool per_tensor = true;
  int threads = 0;
};

using Build = std::function<void(opf::CallBuilder&)>;

// 0 on success; otherwise 1 and the one-line reason in *err.
int run(const char* entry, const Params& p, const Build& build, std::string* err = nullptr) {
  try {
    opf::CallBuilder b(*opf::find_op("multi_tensor"), entry);
    b.param("scale", p.scale).param("a", p.a).param("b", p.b).param("arg_to_check", double(p.check + 1));
    b.param("per_tensor", p.per_tensor).threads(p.threads);
    build(b);
    b.run(module());
    return 0;
  } catch (const opf::Error& e) {
    if (err) *err = e.what();
    return 1;
  }
}

int scale(List& in, List& out, int32_t& flag, const Params& p = {}, std::string* err = nullptr) {
  return run(
      "scale", p,
      [&](opf::CallBuilder& b) {
        in.add_to(b, "in");
        out.add_to(b, "out");
        b.add("noop_flag", &flag, DType::i32, {1});
      },
      err);
}

int axpby(List& x, List& y, List& out, int32_t& flag, const Params& p = {}, std::string* err = nullptr) {
  return run(
      "axpby", p,
      [&](opf::CallBuilder& b) {
        x.add_to(b, "x");
        y.add_to(b, "y");
        out.add_to(b, "out");
        b.add("noop_flag", &flag, DType::i32, {1});
      },
      err);
}

struct Norms {
  float norm = NAN;
  std::vector<float> per;
  int32_t flag = 0;
};
int l2norm(List& t, Norms& r, const Params& p = {}, std::string* err = nullptr) {
  r.per.assign(p.per_tensor ? t.sizes.size() : 0, NAN);
  r.norm = NAN;
  return run(
      "l2norm", p,
      [&](opf::CallBuilder& b) {
        t.add_to(b, "tensors");
        b.add("norm", &r.norm, DType::f32, {1});
        b.add("per_tensor_norms", r.per.data(), DType::f32, {int64_t(r.per.size())});
        b.add("noop_flag", &r.flag, DType::i32, {1});
      },
      err);
}

double f32(double v) { return double(float(v)); }

// |got - want| within the output rounding (twice: f32 math, then the storage dtype) and the f32
// roundings of the operands; NaN/inf must match.
void expect_close(double got, double want, DType dt, double operands, const std::string& where) {
  if (!std::isfinite(want)) {
    EXPECT_TRUE(std::isnan(want) ? std::isnan(got) : got == want) << where << ": " << got << " want " << want;
    return;
  }
  const double tol = 2 * opf::dtype_unit_roundoff(dt) * std::fabs(want) + 4 * 0x1p-24 * operands +
                     (dt == DType::f16    ? 0x1p-24
                      : dt == DType::bf16 ? 0x1p-133
                                          : 0x1p-149);
  EXPECT_LE(std::fabs(got - want), tol) << where << ": " << got << " want " << want;
}

// sizes across the chunk (65536 elements), odd and prime ones, one of millions
const std::vector<int64_t> kMixed = {1, 2, 31, 4099, 65536, 65537, 1000, 3000017};

TEST(MultiTensor, ScaleIntoEveryOutputDtype) {
  for (DType din : kDtypes)
    for (DType dout : kDtypes) {
      List in = List(din, kMixed).fill(1), out = List(dout, kMixed).poison();
      int32_t flag = 0;
      Params p;
      p.scale = 1.0 / 3;
      ASSERT_EQ(scale(in, out, flag, p), 0);
      EXPECT_EQ(flag, 0);
      const std::string tag = std::string(opf::dtype_name(din)) + "->" + std::string(opf::dtype_name(dout));
      int bad = 0;
      for (size_t k = 0; k < kMixed.size() && bad < 3; ++k)
        for (int64_t i = 0; i < kMixed[k]; ++i) {
          const double want = in.at(k, i) * f32(p.scale);
          if (!(std::fabs(out.at(k, i) - want) <= 2 * opf::dtype_unit_roundoff(dout) * std::fabs(want) + 0x1p-24)) {
            ADD_FAILURE() << tag << " tensor " << k << " element " << i << ": " << out.at(k, i) << " want " << want;
            if (++bad == 3) break;
          }
        }
    }
}

// In place (out = in, apex's unscale of the gradients themselves): the same bits as into a copy.
TEST(MultiTensor, ScaleInPlaceMatchesOutOfPlace) {
  for (DType dt : kDtypes) {
    List in = List(dt, kMixed).fill(2), out = List(dt, kMixed).poison();
    int32_t flag = 0;
    ASSERT_EQ(scale(in, out, flag), 0);
    List inplace = in;
    ASSERT_EQ(run("scale", Params{},
                  [&](opf::CallBuilder& b) {
                    inplace.add_to(b, "in");
                    inplace.add_to(b, "out");
                    b.add("noop_flag", &flag, DType::i32, {1});
                  }),
              0);
    EXPECT_TRUE(inplace.same_bits(out)) << opf::dtype_name(dt);
    EXPECT_EQ(flag, 0);
  }
}

// Outputs of 16 MiB and more take the non-temporal store path (manifest tune stream_min_bytes),
// which the sweep's cases are too small for: every element against the formula, an output that
// starts off the vector alignment (one element into its buffer), and in place.
TEST(MultiTensor, LargeOutputsStreamedMatchTheFormula) {
  const std::vector<int64_t> sizes = {4194304 + 3, 5, 1000001};
  const List x = List(DType::f32, sizes).fill(20), y = List(DType::f32, sizes).fill(21);
  Params p;
  p.scale = 1.0 / 7;
  for (const char* entry : {"scale", "axpby"}) {
    const bool ax = entry[0] == 'a';
    std::vector<std::vector<float>> out;
    for (int64_t n : sizes) out.emplace_back(size_t(n) + 1, NAN);
    int32_t flag = 0;
    List xi = x, yi = y;
    ASSERT_EQ(run(entry, p,
                  [&](opf::CallBuilder& b) {
                    xi.add_to(b, ax ? "x" : "in");
                    if (ax) yi.add_to(b, "y");
                    b.empty_list("out");
                    for (size_t k = 0; k < sizes.size(); ++k) b.add("out", out[k].data() + 1, DType::f32, {sizes[k]});
                    b.add("noop_flag", &flag, DType::i32, {1});
                  }),
              0);
    EXPECT_EQ(flag, 0);
    int bad = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
      EXPECT_TRUE(std::isnan(out[k][0])) << "wrote before the output";
      for (int64_t i = 0; i < sizes[k] && bad < 3; ++i) {
        const double got = out[k][size_t(i) + 1];
        const double want = ax ? double(float(f32(p.a) * x.at(k, i))) + double(float(f32(p.b) * y.at(k, i)))
                               : x.at(k, i) * f32(p.scale);
        if (!(std::fabs(got - want) <= 0x1p-23 * std::fabs(want) + 0x1p-149)) {
          ++bad;
          ADD_FAILURE() << entry << " tensor " << k << " element " << i << ": " << got << " want " << want;
        }
      }
    }
    if (ax) continue;
    List inplace = x;  // in place: the same bits
    ASSERT_EQ(run("scale", p,
                  [&](opf::CallBuilder& b) {
                    inplace.add_to(b, "in");
                    inplace.add_to(b, "out");
                    b.add("noop_flag", &flag, DType::i32, {1});
                  }),
              0);
    for (size_t k = 0; k < sizes.size(); ++k)
      EXPECT_EQ(0, std::memcmp(inplace.data[k].data(), out[k].data() + 1, size_t(sizes[k]) * 4)) << "tensor " << k;
  }
}

// A NaN or inf input: the flag is set, that element is NaN/inf, every other one bitwise as in a
// clean run. A set flag is never cleared, and does not stop the computation.
TEST(MultiTensor, ScaleNonFiniteSetsTheFlagAndStaysInItsElement) {
  for (DType dt : kDtypes) {
    List clean = List(dt, {5, 100, 70001}).fill(3), bad = clean;
    bad.set(1, 17, kInf);
    bad.set(2, 69999, kNaN);
    List out_clean = List(dt, clean.sizes).poison(), out_bad = out_clean;
    int32_t f_clean = 0, f_bad = 0;
    ASSERT_EQ(scale(clean, out_clean, f_clean), 0);
    ASSERT_EQ(scale(bad, out_bad, f_bad), 0);
    EXPECT_EQ(f_clean, 0);
    EXPECT_EQ(f_bad, 1) << opf::dtype_name(dt);
    EXPECT_EQ(out_bad.at(1, 17), kInf);
    EXPECT_TRUE(std::isnan(out_bad.at(2, 69999)));
    out_bad.set(1, 17, out_clean.at(1, 17));
    out_bad.set(2, 69999, out_clean.at(2, 69999));
    EXPECT_TRUE(out_bad.same_bits(out_clean)) << opf::dtype_name(dt);
    for (int32_t preset : {1, 5}) {  // finite input, flag already set: kept, outputs still written
      int32_t flag = preset;
      List out = List(dt, clean.sizes).poison();
      ASSERT_EQ(scale(clean, out, flag), 0);
      EXPECT_EQ(flag, preset);
      EXPECT_TRUE(out.same_bits(out_clean));
    }
  }
}

TEST(MultiTensor, AxpbyMatchesTheFormulaIntoEveryOutputDtype) {
  for (DType din : kDtypes)
    for (DType dout : {din, DType::f32}) {
      List x = List(din, kMixed).fill(4), y = List(din, kMixed).fill(5, -3, 2), out = List(dout, kMixed).poison();
      int32_t flag = 0;
      Params p;
      ASSERT_EQ(axpby(x, y, out, flag, p), 0);
      EXPECT_EQ(flag, 0);
      const double a = f32(p.a), b = f32(p.b);
      for (size_t k = 0; k < kMixed.size(); ++k)
        for (int64_t i = 0; i < kMixed[k]; i += 1 + kMixed[k] / 5000) {
          const double ax = a * x.at(k, i), by = b * y.at(k, i);
          expect_close(
              out.at(k, i), ax + by, dout, std::fabs(ax) + std::fabs(by),
              std::string(opf::dtype_name(din)) + " tensor " + std::to_string(k) + " element " + std::to_string(i));
          if (HasFailure()) return;
        }
      // the last element of every tensor (a scalar tail in the kernel)
      for (size_t k = 0; k < kMixed.size(); ++k) {
        const int64_t i = kMixed[k] - 1;
        expect_close(out.at(k, i), a * x.at(k, i) + b * y.at(k, i), dout,
                     std::fabs(a * x.at(k, i)) + std::fabs(b * y.at(k, i)), "last of " + std::to_string(k));
      }
    }
}

// arg_to_check: -1 checks x and y, 0 only x, 1 only y; the outputs are the same either way.
TEST(MultiTensor, AxpbyChecksTheInputsArgToCheckNames) {
  for (DType dt : kDtypes)
    for (int bad_in : {0, 1})  // a NaN in x, or an inf in y
      for (int check : {-1, 0, 1}) {
        List x = List(dt, {3, 777}).fill(6), y = List(dt, {3, 777}).fill(7), out = List(dt, {3, 777}).poison();
        (bad_in == 0 ? x : y).set(1, 500, bad_in == 0 ? kNaN : -kInf);
        int32_t flag = 0;
        Params p;
        p.check = check;
        ASSERT_EQ(axpby(x, y, out, flag, p), 0);
        const bool expect = check == -1 || check == bad_in;
        EXPECT_EQ(flag, expect ? 1 : 0) << opf::dtype_name(dt) << ": non-finite " << (bad_in ? "y" : "x")
                                        << ", arg_to_check " << check;
        EXPECT_FALSE(std::isfinite(out.at(1, 500)));
        EXPECT_TRUE(std::isfinite(out.at(1, 499)) && std::isfinite(out.at(0, 2)));
      }
}

// float64 sum of squares per tensor
std::vector<double> sums_of_squares(const List& t) {
  std::vector<double> s(t.sizes.size(), 0.0);
  for (size_t k = 0; k < t.sizes.size(); ++k)
    for (int64_t i = 0; i < t.sizes[k]; ++i) s[k] += t.at(k, i) * t.at(k, i);
  return s;
}

// f32 chunk sums of at most 65536 squares in 4 x lanes accumulators (>= 1024 terms each on
// AVX-512, 4096 on SSE4): about u sqrt(terms / 3) relative on the sum, half that on the norm; a
// lost or doubled chunk is far beyond 4e-6.
void expect_norm(double got, double want, const std::string& where) {
  EXPECT_LE(std::fabs(got - want), 4e-6 * want + 1e-30) << where << ": " << got << " want " << want;
}

TEST(MultiTensor, L2NormOfMixedSizes) {
  for (DType dt : kDtypes) {
    List t = List(dt, kMixed).fill(8);
    Norms r;
    ASSERT_EQ(l2norm(t, r), 0);
    EXPECT_EQ(r.flag, 0);
    const auto s = sums_of_squares(t);
    double total = 0;
    for (size_t k = 0; k < s.size(); ++k) {
      expect_norm(r.per[k], std::sqrt(s[k]), std::string(opf::dtype_name(dt)) + " tensor " + std::to_string(k));
      total += s[k];
    }
    expect_norm(r.norm, std::sqrt(total), std::string(opf::dtype_name(dt)) + " global");
    // one element: the norm is |x| up to the f32 roundings of x*x and the sqrt
    EXPECT_NEAR(r.per[0], std::fabs(t.at(0, 0)), 2 * 0x1p-24 * std::fabs(t.at(0, 0)));
  }
}

// per_tensor off: per_tensor_norms is [0] (apex: an empty tensor), and the global norm is the same
TEST(MultiTensor, L2NormWithoutPerTensorTakesAnEmptyOutput) {
  List t = List(DType::bf16, {1000, 3, 65537}).fill(9);
  Norms on, off;
  Params p;
  ASSERT_EQ(l2norm(t, on, p), 0);
  p.per_tensor = false;
  ASSERT_EQ(l2norm(t, off, p), 0);
  EXPECT_EQ(off.per.size(), 0u);
  EXPECT_EQ(std::memcmp(&on.norm, &off.norm, 4), 0);
  // the wrong size either way is refused, naming the argument
  std::string err;
  for (bool per_tensor : {true, false}) {
    p.per_tensor = per_tensor;
    std::vector<float> wrong(per_tensor ? 2 : 3, NAN);
    float norm = NAN;
    int32_t flag = 0;
    EXPECT_NE(run(
                  "l2norm", p,
                  [&](opf::CallBuilder& b) {
                    t.add_to(b, "tensors");
                    b.add("norm", &norm, DType::f32, {1});
                    b.add("per_tensor_norms", wrong.data(), DType::f32, {int64_t(wrong.size())});
                    b.add("noop_flag", &flag, DType::i32, {1});
                  },
                  &err),
              0);
    EXPECT_NE(err.find("per_tensor_norms"), std::string::npos) << err;
    EXPECT_TRUE(std::isnan(norm)) << "written despite the error";
  }
}

// Squares beyond f32 (|x| >= 2^64: f32 and bf16 hold such values, f16 does not): the chunk's sum
// is inf, so is its tensor's norm and the global norm; the flag is set; other tensors are exact.
TEST(MultiTensor, L2NormOverflowAndNonFinite) {
  for (DType dt : kDtypes) {
    for (double v : {1e20, kInf, kNaN}) {
      if (dt == DType::f16 && v == 1e20) continue;
      List t = List(dt, {10, 200000, 7}).fill(10);
      t.set(1, 150000, v);
      Norms r;
      ASSERT_EQ(l2norm(t, r), 0);
      EXPECT_EQ(r.flag, 1) << opf::dtype_name(dt) << " " << v;
      const auto s = sums_of_squares(List(t));
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(r.per[1]) && std::isnan(r.norm));
      } else {
        EXPECT_EQ(r.per[1], INFINITY);
        EXPECT_EQ(r.norm, INFINITY);
      }
      expect_norm(r.per[0], std::sqrt(s[0]), "tensor 0");
      expect_norm(r.per[2], std::sqrt(s[2]), "tensor 2");
    }
  }
  // large but finite squares (f32 x = 2^60, x^2 = 2^120) do not overflow
  List t = List(DType::f32, {5}).fill(11);
  t.set(0, 3, 0x1p60);
  Norms r;
  ASSERT_EQ(l2norm(t, r), 0);
  EXPECT_EQ(r.flag, 0);
  EXPECT_NEAR(r.norm, 0x1p60, 0x1p60 * 1e-6);
}

TEST(MultiTensor, EmptyListsAreANoOp) {
  for (int32_t preset : {0, 1}) {
    List a(DType::f32, {}), b(DType::f16, {}), c(DType::f32, {});
    int32_t flag = preset;
    std::string err;
    EXPECT_EQ(scale(a, b, flag, {}, &err), 0) << err;
    EXPECT_EQ(axpby(a, c, b, flag, {}, &err), 0) << err;
    EXPECT_EQ(flag, preset);
    Norms r;
    r.flag = preset;
    ASSERT_EQ(l2norm(a, r, {}, &err), 0) << err;
    EXPECT_EQ(r.norm, 0.0f);  // poisoned before: written
    EXPECT_EQ(r.flag, preset);
  }
}

// A malformed call fails with one line naming the list (and index), and writes nothing.
void expect_refused(const char* what, int rc, const std::string& err, const std::string& needle, const List& out,
                    const List& poisoned) {
  EXPECT_NE(rc, 0) << what;
  EXPECT_NE(err.find(needle), std::string::npos) << what << ": " << err;
  EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  EXPECT_TRUE(out.same_bits(poisoned)) << what << ": written despite the error";
}

TEST(MultiTensor, MismatchedListsAreRefusedNamingTheList) {
  const std::vector<int64_t> sizes = {3, 64, 5, 9};
  List in = List(DType::f32, sizes).fill(12), y = List(DType::f32, sizes).fill(13);
  const List poisoned = List(DType::f32, sizes).poison();
  std::string err;
  int32_t flag = 0;
  {
    List out = poisoned, in3(DType::f32, {3, 64, 5});
    in3.fill(14);
    expect_refused("out longer", scale(in3, out, flag, {}, &err), err, "scale: list out has 4 tensors, in has 3", out,
                   poisoned);
  }
  {
    List out3 = List(DType::f32, {3, 64, 5}).poison(), p3 = out3;
    expect_refused("out shorter", scale(in, out3, flag, {}, &err), err, "list out has 3 tensors, in has 4", out3, p3);
  }
  {
    List out = List(DType::f32, {3, 64, 4, 9}).poison(), p = out;
    expect_refused("numel", scale(in, out, flag, {}, &err), err, "out[2] has 4 elements, in[2] has 5", out, p);
  }
  {
    List out = poisoned, y3(DType::f32, {3, 64, 5});
    y3.fill(15);
    expect_refused("y shorter", axpby(in, y3, out, flag, {}, &err), err, "axpby: list y has 3 tensors, x has 4", out,
                   poisoned);
  }
  {
    List out = poisoned, yh = List(DType::f16, sizes).fill(16);
    expect_refused("y dtype", axpby(in, yh, out, flag, {}, &err), err, "y[0] has dtype f16, expected f32", out,
                   poisoned);
  }
  {  // out's dtype is free but one for the whole list
    List out = poisoned;
    std::vector<uint16_t> half(9, 0x7e00);
    const int rc = run(
        "scale", Params{},
        [&](opf::CallBuilder& b) {
          in.add_to(b, "in");
          b.empty_list("out");
          for (size_t k = 0; k < 3; ++k) b.add("out", out.data[k].data(), DType::f32, {sizes[k]});
          b.add("out", half.data(), DType::f16, {9});
          b.add("noop_flag", &flag, DType::i32, {1});
        },
        &err);
    expect_refused("out dtype", rc, err, "out[3] has dtype f16, expected f32", out, poisoned);
  }
  {  // an i32 output list
    List out = poisoned;
    const int rc = run(
        "scale", Params{},
        [&](opf::CallBuilder& b) {
          in.add_to(b, "in");
          b.empty_list("out");
          for (size_t k = 0; k < 4; ++k) b.add("out", out.data[k].data(), DType::i32, {sizes[k]});
          b.add("noop_flag", &flag, DType::i32, {1});
        },
        &err);
    expect_refused("out i32", rc, err, "out[0] has dtype i32, expected f32, f16 or bf16", out, poisoned);
  }
  {  // out[1] starts one element into in[1]
    List out = poisoned;
    const int rc = run(
        "scale", Params{},
        [&](opf::CallBuilder& b) {
          in.add_to(b, "in");
          b.empty_list("out");
          for (size_t k = 0; k < 4; ++k)
            b.add("out", k == 1 ? static_cast<void*>(in.data[1].data() + 4) : out.data[k].data(), DType::f32,
                  {k == 1 ? 63 : sizes[k]});
          b.add("noop_flag", &flag, DType::i32, {1});
        },
        &err);
    EXPECT_NE(rc, 0);
    EXPECT_NE(err.find("out[1] has 63 elements"), std::string::npos) << err;
  }
  {  // an f16 out list whose element 1 is in[1]'s memory: the same start, another dtype
    List out = List(DType::f16, sizes).poison(), in_copy = in;
    const List out_before = out;
    const int rc = run(
        "scale", Params{},
        [&](opf::CallBuilder& b) {
          in_copy.add_to(b, "in");
          b.empty_list("out");
          for (size_t k = 0; k < 4; ++k)
            b.add("out", k == 1 ? static_cast<void*>(in_copy.data[1].data()) : out.data[k].data(), DType::f16,
                  {sizes[k]});
          b.add("noop_flag", &flag, DType::i32, {1});
        },
        &err);
    EXPECT_NE(rc, 0);
    EXPECT_NE(err.find("out[1] overlaps in[1]"), std::string::npos) << err;
    EXPECT_TRUE(in_copy.same_bits(in) && out.same_bits(out_before)) << "written despite the error";
  }
  {  // the flag must be i32 [1]
    List out = poisoned;
    int64_t wide = 0;
    const int rc = run(
        "scale", Params{},
        [&](opf::CallBuilder& b) {
          in.add_to(b, "in");
          out.add_to(b, "out");
          b.add("noop_flag", &wide, DType::i64, {1});
        },
        &err);
    expect_refused("flag dtype", rc, err, "noop_flag) has dtype i64, expected i32", out, poisoned);
  }
  {  // l2norm's norm must be f32 [1]
    float two[2] = {NAN, NAN};
    std::vector<float> per(4, NAN);
    const int rc = run(
        "l2norm", Params{},
        [&](opf::CallBuilder& b) {
          in.add_to(b, "tensors");
          b.add("norm", two, DType::f32, {2});
          b.add("per_tensor_norms", per.data(), DType::f32, {4});
          b.add("noop_flag", &flag, DType::i32, {1});
        },
        &err);
    EXPECT_NE(rc, 0);
    EXPECT_NE(err.find("(norm) has size 2 in dim 0, expected 1"), std::string::npos) << err;
    EXPECT_TRUE(std::isnan(two[0]) && std::isnan(per[0]));
  }
  {  // mixed dtypes within the input list
    std::vector<uint16_t> half(9, 0x3c00);
    Norms r;
    r.per.assign(4, NAN);
    const int rc = run(
        "l2norm", Params{},
        [&](opf::CallBuilder& b) {
          b.empty_list("tensors");
          for (size_t k = 0; k < 3; ++k) b.add("tensors", in.data[k].data(), DType::f32, {sizes[k]});
          b.add("tensors", half.data(), DType::f16, {9});
          b.add("norm", &r.norm, DType::f32, {1});
          b.add("per_tensor_norms", r.per.data(), DType::f32, {4});
          b.add("noop_flag", &flag, DType::i32, {1});
        },
        &err);
    EXPECT_NE(rc, 0);
    EXPECT_NE(err.find("tensors[3] has dtype f16, tensors[0] has f32"), std::string::npos) << err;
    EXPECT_TRUE(std::isnan(r.norm));
  }
  EXPECT_EQ(flag, 0);
}

// The op takes dense tensors (no `view` in the manifest): a strided element is refused.
TEST(MultiTensor, StridedViewIsRefused) {
  List in = List(DType::f32, {64}).fill(17), out = List(DType::f32, {16}).poison();
  const List poisoned = out;
  int32_t flag = 0;
  std::string err;
  const int rc = run(
      "scale", Params{},
      [&](opf::CallBuilder& b) {
        b.add("in", in.data[0].data(), DType::f32, {16}, {4});  // every 4th element
        out.add_to(b, "out");
        b.add("noop_flag", &flag, DType::i32, {1});
      },
      &err);
  expect_refused("strided in", rc, err, "(in) is not contiguous", out, poisoned);
}

// Tasks group chunks of many tensors; the results must not depend on which thread ran which.
TEST(MultiTensor, ThreadCountsGiveTheSameBitsOnManySmallTensors) {
  std::vector<int64_t> sizes;
  std::mt19937_64 rng(kSeed);
  for (int k = 0; k < 300; ++k) sizes.push_back(1 + int64_t(rng() % 3000));
  sizes.push_back(3 * 65536 + 5);
  const List x = List(DType::bf16, sizes).fill(18), y = List(DType::bf16, sizes).fill(19);
  Norms first;
  List out1 = List(DType::f32, sizes).poison();
  for (int threads : {1, 2, 3, 4}) {
    Params p;
    p.threads = threads;
    List xi = x, yi = y, out = List(DType::f32, sizes).poison();
    int32_t flag = 0;
    ASSERT_EQ(axpby(xi, yi, out, flag, p), 0);
    Norms r;
    ASSERT_EQ(l2norm(xi, r, p), 0);
    if (threads == 1) {
      first = r;
      out1 = out;
      continue;
    }
    EXPECT_TRUE(out.same_bits(out1)) << threads << " threads";
    EXPECT_EQ(std::memcmp(&r.norm, &first.norm, 4), 0) << threads << " threads";
    EXPECT_EQ(std::memcmp(r.per.data(), first.per.data(), 4 * r.per.size()), 0) << threads << " threads";
  }
}

TEST(MultiTensor, UnknownEntryIsRefused) {
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
