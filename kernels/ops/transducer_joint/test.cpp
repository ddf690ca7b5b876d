// transducer_joint — what the registry sweep cannot state: the bits of both entries (h = the f32
// sum rounded once, -1 in the unpacked don't-care region; grad_f / grad_g the f32 sums in
// ascending u / t, checked bitwise against those sums computed here) on random lengths (zero and
// full included), the same bits at 1-4 threads, grad_h's don't-care region never read (NaN
// there changes nothing), lengths and batch_offset out of range (one line naming the position,
// nothing written), NaN / inf through the ReLU, empty batches, and malformed arguments; dropout
// with a given keep mask (p = 0 the same bits as no dropout whatever the mask, an all-keep mask
// scaled, dropped elements with the ReLU, the mask's don't-care region never read, bad masks
// named); dropout_mask against Philox4x32-10 (checked here on Random123's known answers) at
// every element, at any thread count, packed = unpacked at the valid positions. Seeded
// inputs (seed printed); outputs poisoned with NaN before every call. Runs the module the loader
// gives this build (prebuilt or JIT).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iterator>
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
constexpr uint64_t kSeed = 20251203;

const opf_module_info* module() {
  static const opf_module_info* m = [] {
    std::printf("seed %llu\n", (unsigned long long)kSeed);
    return opf::Loader::instance().load(*opf::find_op("transducer_joint"), "cpu").info;
  }();
  return m;
}

struct Buf {
  DType dt;
  std::vector<std::byte> bytes;
  Buf(DType d, size_t n) : dt(d), bytes(n * opf::dtype_size(d)) {}
  int64_t size() const { return int64_t(bytes.size() / opf::dtype_size(dt)); }
  double at(int64_t i) const { return opf::load_element(dt, bytes.data(), i); }
  void set(int64_t i, double v) { opf::store_element(dt, bytes.data(), i, v); }
  void poison() {
    for (int64_t i = 0; i < size(); ++i) set(i, std::nan(""));
  }
  void* data() { return bytes.data(); }
};

// The stored value of x in dt (what the kernel's final rounding gives).
double stored(DType dt, double x) {
  std::byte b[8];
  opf::store_element(dt, b, 0, x);
  return opf::load_element(dt, b, 0);
}

struct Case {
  DType dt;
  int64_t nb, nt, nu, nh;
  bool relu = false, packed = false;
  double drop = 0;          // dropout_prob
  bool empty_mask = false;  // pass the mask as [0] (allowed with drop = 0)
  opf::Shape bad_mask;      // non-empty: pass the mask with this shape (and mask's dtype) instead
  Buf f, g, h, dh, df, dg;
  Buf mask{DType::u8, 0};  // h's layout, random keep bits (about 1 - drop_bits kept)
  std::vector<int32_t> fl, gl;
  std::vector<int64_t> off;

  Case(DType d, int64_t b, int64_t t, int64_t u, int64_t hh, uint64_t salt = 0)
      : dt(d),
        nb(b),
        nt(t),
        nu(u),
        nh(hh),
        f(d, size_t(b * t * hh)),
        g(d, size_t(b * u * hh)),
        h(d, 0),
        dh(d, 0),
        df(d, size_t(b * t * hh)),
        dg(d, size_t(b * u * hh)),
        fl(size_t(b)),
        gl(size_t(b)),
        off(size_t(b)) {
    std::mt19937_64 rng(kSeed + salt);
    std::uniform_real_distribution<double> un(0.0, 1.0);
    auto fill = [&](Buf& x) {
      for (int64_t i = 0; i < x.size(); ++i) {
        double v;
        do v = -1 + 2 * un(rng);
        while (std::fabs(v) < 1e-3);  // never zero: hides scaling bugs
        x.set(i, v);
      }
    };
    fill(f);
    fill(g);
    for (int64_t i = 0; i < b; ++i) {  // batch 0 full, the last empty in T (if b > 2), the rest random
      fl[size_t(i)] = i == 0 ? int32_t(t) : i == b - 1 && b > 2 ? 0 : int32_t(rng() % uint64_t(t + 1));
      gl[size_t(i)] = i == 0 ? int32_t(u) : int32_t(rng() % uint64_t(u + 1));
    }
    set_offsets();
    dh = Buf(d, size_t(joint_rows() * nh));
    fill(dh);
    h = Buf(d, size_t(joint_rows() * nh));
    draw_mask(0.4);
  }
  // A fresh keep mask in h's layout, each element dropped with probability p (never all kept
  // or all dropped for more than a few elements: the draw is checked by the tests that need it).
  void draw_mask(double p, uint64_t salt = 7) {
    mask = Buf(DType::u8, size_t(joint_rows() * nh));
    std::mt19937_64 rng(kSeed + 1000 + salt);
    std::uniform_real_distribution<double> un(0.0, 1.0);
    for (int64_t i = 0; i < mask.size(); ++i) mask.set(i, un(rng) < p ? 0.0 : 1.0);
  }
  void set_offsets() {
    int64_t s = 0;
    for (int64_t i = 0; i < nb; ++i) off[size_t(i)] = s += int64_t(fl[size_t(i)]) * gl[size_t(i)];
  }
  int64_t packed_rows() const { return nb ? off[size_t(nb - 1)] : 0; }
  int64_t joint_rows() const { return packed ? packed_rows() : nb * nt * nu; }
  opf::Shape joint_shape() const { return packed ? opf::Shape{packed_rows(), nh} : opf::Shape{nb, nt, nu, nh}; }
  // (b, t, u)'s row in h / grad_h; -1: not stored (packed don't-care)
  int64_t row(int64_t b, int64_t t, int64_t u) const {
    if (!packed) return (b * nt + t) * nu + u;
    if (t >= fl[size_t(b)] || u >= gl[size_t(b)]) return -1;
    return (b ? off[size_t(b - 1)] : 0) + t * gl[size_t(b)] + u;
  }
  // Packed and unpacked need their own grad_h / h buffers: call after changing `packed`.
  void repack() {
    Buf nd(dt, size_t(joint_rows() * nh));
    std::mt19937_64 rng(kSeed + 99);
    std::uniform_real_distribution<double> un(0.5, 1.0);
    for (int64_t i = 0; i < nd.size(); ++i) nd.set(i, (rng() & 1 ? 1 : -1) * un(rng));
    dh = nd;
    h = Buf(dt, size_t(joint_rows() * nh));
    draw_mask(0.4);
  }

  void common(opf::CallBuilder& b) {
    b.add("f", f.data(), dt, {nb, nt, nh}).add("g", g.data(), dt, {nb, nu, nh});
    b.add("f_len", fl.data(), DType::i32, {nb}).add("g_len", gl.data(), DType::i32, {nb});
    b.add("batch_offset", off.data(), DType::i64, {nb});
    b.param("relu", relu).param("packed", packed).param("dropout_prob", drop);
    if (!bad_mask.empty()) b.add("mask", mask.data(), mask.dt, bad_mask);
    else if (empty_mask) b.add("mask", mask.data(), DType::u8, {0});
    else b.add("mask", mask.data(), DType::u8, joint_shape());
  }
  int forward(std::string* err = nullptr, int threads = 0) {
    h.poison();
    try {
      opf::CallBuilder b(*opf::find_op("transducer_joint"), "forward");
      common(b);
      b.add("h", h.data(), dt, joint_shape()).threads(threads).run(module());
      return 0;
    } catch (const opf::Error& e) {
      if (err) *err = e.what();
      return 1;
    }
  }
  int backward(std::string* err = nullptr, int threads = 0) {
    df.poison();
    dg.poison();
    try {
      opf::CallBuilder b(*opf::find_op("transducer_joint"), "backward");
      b.add("grad_h", dh.data(), dt, joint_shape());
      common(b);
      b.add("grad_f", df.data(), dt, {nb, nt, nh}).add("grad_g", dg.data(), dt, {nb, nu, nh});
      b.threads(threads).run(module());
      return 0;
    } catch (const opf::Error& e) {
      if (err) *err = e.what();
      return 1;
    }
  }

  // dropout_mask into `mask` (h's layout; a bad_mask shape / mask dtype when set)
  int generate(int64_t seed, std::string* err = nullptr, int threads = 0) {
    for (int64_t i = 0; i < mask.size(); ++i) mask.set(i, 171.0);  // poison: neither 0 nor 1
    try {
      opf::CallBuilder b(*opf::find_op("transducer_joint"), "dropout_mask");
      b.add("f", f.data(), dt, {nb, nt, nh}).add("g", g.data(), dt, {nb, nu, nh});
      b.add("f_len", fl.data(), DType::i32, {nb}).add("g_len", gl.data(), DType::i32, {nb});
      b.add("batch_offset", off.data(), DType::i64, {nb});
      b.param("relu", relu).param("packed", packed).param("dropout_prob", drop).param("seed", double(seed));
      b.add("mask", mask.data(), mask.dt, bad_mask.empty() ? joint_shape() : bad_mask);
      b.threads(threads).run(module());
      return 0;
    } catch (const opf::Error& e) {
      if (err) *err = e.what();
      return 1;
    }
  }

  float sum(int64_t b, int64_t t, int64_t u, int64_t c) const {
    return float(f.at((b * nt + t) * nh + c)) + float(g.at((b * nu + u) * nh + c));
  }
  // the dropout factor of element i of h / grad_h (a valid position), as the contract states it
  float factor(int64_t i) const {
    if (drop == 0) return 1.0f;
    return mask.at(i) != 0 ? float(1.0 / (1.0 - drop)) : 0.0f;
  }
  void expect_bits(const Buf& got, int64_t i, double want, const char* what) const {
    const double w = stored(dt, want);
    EXPECT_TRUE(got.at(i) == w || (std::isnan(w) && std::isnan(got.at(i))))
        << what << "[" << i << "] = " << got.at(i) << ", want " << w;
  }
  void check_forward() const {
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t t = 0; t < nt; ++t)
        for (int64_t u = 0; u < nu; ++u) {
          const int64_t r = row(b, t, u);
          if (r < 0) continue;
          const bool valid = t < fl[size_t(b)] && u < gl[size_t(b)];
          for (int64_t c = 0; c < nh; ++c) {
            float s = sum(b, t, u, c);
            if (relu && s < 0) s = 0.0f;
            if (valid && drop > 0) s = s * factor(r * nh + c);
            expect_bits(h, r * nh + c, !valid ? -1.0 : double(s), "h");
            if (::testing::Test::HasFailure()) return;
          }
        }
  }
  void check_backward() const {
    std::vector<float> sf(size_t(nb * nt * nh), 0.0f), sg(size_t(nb * nu * nh), 0.0f);
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t t = 0; t < fl[size_t(b)]; ++t)
        for (int64_t u = 0; u < gl[size_t(b)]; ++u)
          for (int64_t c = 0; c < nh; ++c) {
            const int64_t i = row(b, t, u) * nh + c;
            const float d = drop > 0 ? float(dh.at(i)) * factor(i) : float(dh.at(i));
            const float x = relu && sum(b, t, u, c) <= 0 ? 0.0f : d;
            sf[size_t((b * nt + t) * nh + c)] += x;
            sg[size_t((b * nu + u) * nh + c)] += x;
          }
    for (int64_t i = 0; i < df.size() && !::testing::Test::HasFailure(); ++i)
      expect_bits(df, i, sf[size_t(i)], "grad_f");
    for (int64_t i = 0; i < dg.size() && !::testing::Test::HasFailure(); ++i)
      expect_bits(dg, i, sg[size_t(i)], "grad_g");
  }
};

const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

// One element, U = 1, prime sizes, H below / across a vector,
// U large enough that the backward's column block (208) shrinks below H (300 x 250), H over the
// 1024-column cap (1031).
TEST(TransducerJoint, EdgeShapesMatchTheContractBitwise) {
  const int64_t shapes[][4] = {{1, 1, 1, 1},   {1, 1, 1, 17},  {3, 7, 5, 33},    {2, 13, 1, 64},
                               {4, 5, 11, 17}, {3, 3, 2, 513}, {2, 3, 300, 250}, {5, 2, 3, 1031}};
  // dropout on every other shape, to keep CI time (1 x 17, U = 1, H = 513 and 1031 past the column
  // cap); a shrunken column block meets it in SameBitsForEveryThreadCount
  for (DType dt : kDtypes)
    for (size_t k = 0; k < std::size(shapes); ++k)
      for (int mode = 0; mode < 4; ++mode) {
        const auto& s = shapes[k];
        SCOPED_TRACE(std::string(opf::dtype_name(dt)) + " " + std::to_string(s[0]) + "x" + std::to_string(s[1]) + "x" +
                     std::to_string(s[2]) + "x" + std::to_string(s[3]) + " relu " + std::to_string(mode & 1) +
                     " packed " + std::to_string(mode >> 1) + " dropout " + std::to_string(k % 2));
        Case c(dt, s[0], s[1], s[2], s[3], uint64_t(mode));
        c.relu = mode & 1;
        c.packed = mode >> 1;
        c.drop = k % 2 ? 0.3 : 0.0;
        c.repack();
        ASSERT_EQ(c.forward(), 0);
        c.check_forward();
        ASSERT_EQ(c.backward(), 0);
        c.check_backward();
        if (::testing::Test::HasFailure()) return;
      }
}

TEST(TransducerJoint, SameBitsForEveryThreadCount) {
  for (DType dt : kDtypes)
    for (int packed = 0; packed < 2; ++packed) {
      Case c(dt, 3, 6, 200, 700, 5);  // backward column blocks 320, 320, 60
      c.relu = true;
      c.packed = packed;
      c.drop = 0.25;
      c.repack();
      ASSERT_EQ(c.forward(nullptr, 1), 0);
      ASSERT_EQ(c.backward(nullptr, 1), 0);
      c.check_forward();
      c.check_backward();
      const auto h1 = c.h.bytes, f1 = c.df.bytes, g1 = c.dg.bytes;
      for (int threads : {2, 3, 4}) {
        ASSERT_EQ(c.forward(nullptr, threads), 0);
        ASSERT_EQ(c.backward(nullptr, threads), 0);
        EXPECT_TRUE(c.h.bytes == h1 && c.df.bytes == f1 && c.dg.bytes == g1)
            << opf::dtype_name(dt) << " packed " << packed << ", " << threads << " threads";
      }
    }
}

// An h of at least stream_min_bytes (32 MiB) is written with streaming stores: the same bits,
// rows not aligned to a vector (H = 1031), the -1 fill streamed too.
TEST(TransducerJoint, LargeOutputIsStreamedWithTheSameBits) {
  Case c(DType::f32, 2, 64, 64, 1031, 11);
  c.relu = true;
  ASSERT_GE(c.h.bytes.size(), size_t(32) << 20);
  ASSERT_EQ(c.forward(nullptr, 2), 0);
  c.check_forward();
  c.drop = 0.5;
  ASSERT_EQ(c.forward(nullptr, 2), 0);
  c.check_forward();
}

// grad_h's don't-care region (unpacked) is never read: NaN there leaves every output finite.
TEST(TransducerJoint, BackwardIgnoresTheDontCareRegion) {
  for (DType dt : kDtypes) {
    Case c(dt, 4, 9, 6, 40, 3);
    c.fl = {9, 4, 0, 7};
    c.gl = {6, 2, 5, 0};
    c.set_offsets();
    int64_t poisoned = 0;
    for (int64_t b = 0; b < c.nb; ++b)
      for (int64_t t = 0; t < c.nt; ++t)
        for (int64_t u = 0; u < c.nu; ++u)
          if (t >= c.fl[size_t(b)] || u >= c.gl[size_t(b)])
            for (int64_t k = 0; k < c.nh; ++k, ++poisoned) c.dh.set(c.row(b, t, u) * c.nh + k, std::nan(""));
    ASSERT_GT(poisoned, 0);
    ASSERT_EQ(c.backward(), 0);
    c.check_backward();
    for (int64_t i = 0; i < c.df.size(); ++i) ASSERT_TRUE(std::isfinite(c.df.at(i))) << "grad_f " << i;
    for (int64_t i = 0; i < c.dg.size(); ++i) ASSERT_TRUE(std::isfinite(c.dg.at(i))) << "grad_g " << i;
    // batch 2 (f_len 0) and 3 (g_len 0): all zeros
    for (int64_t i = 2 * 9 * 40; i < 4 * 9 * 40; ++i) ASSERT_EQ(c.df.at(i), 0.0) << i;
    for (int64_t i = 2 * 6 * 40; i < 4 * 6 * 40; ++i) ASSERT_EQ(c.dg.at(i), 0.0) << i;
  }
}

// NaN and inf in f reach only their column of their t's rows; the ReLU keeps NaN, zeroes -inf;
// the backward passes grad_h where f + g is NaN (not <= 0) and drops it where it is -inf.
TEST(TransducerJoint, NonFiniteValuesStayInTheirColumn) {
  for (DType dt : kDtypes) {
    Case c(dt, 2, 5, 4, 19, 8);
    c.relu = true;
    c.fl = {5, 3};
    c.gl = {4, 4};
    c.set_offsets();
    c.f.set((0 * 5 + 2) * 19 + 7, std::nan(""));
    c.f.set((1 * 5 + 1) * 19 + 3, -std::numeric_limits<double>::infinity());
    ASSERT_EQ(c.forward(), 0);
    c.check_forward();
    for (int64_t u = 0; u < 4; ++u) {
      EXPECT_TRUE(std::isnan(c.h.at(c.row(0, 2, u) * 19 + 7)));
      EXPECT_EQ(c.h.at(c.row(1, 1, u) * 19 + 3), 0.0);
    }
    ASSERT_EQ(c.backward(), 0);
    c.check_backward();
  }
}

// dropout_prob = 0: the mask is not read. An all-drop mask, a random one and an empty [0] one give
// the bits of the contract without dropout, in both layouts.
TEST(TransducerJoint, DropoutOffGivesTheBitsOfNoDropoutWhateverTheMask) {
  for (DType dt : kDtypes)
    for (int packed = 0; packed < 2; ++packed) {
      Case c(dt, 3, 7, 5, 33, 21);
      c.relu = true;
      c.packed = packed;
      c.repack();
      const Buf random_mask = c.mask;
      for (int64_t i = 0; i < c.mask.size(); ++i) c.mask.set(i, 0.0);
      ASSERT_EQ(c.forward(), 0);
      ASSERT_EQ(c.backward(), 0);
      c.check_forward();
      c.check_backward();
      const auto h0 = c.h.bytes, f0 = c.df.bytes, g0 = c.dg.bytes;
      for (int variant = 0; variant < 2; ++variant) {
        if (variant == 0) c.mask = random_mask;
        c.empty_mask = variant == 1;
        std::string err;
        ASSERT_EQ(c.forward(&err), 0) << err;
        ASSERT_EQ(c.backward(&err), 0) << err;
        EXPECT_TRUE(c.h.bytes == h0 && c.df.bytes == f0 && c.dg.bytes == g0)
            << opf::dtype_name(dt) << " packed " << packed << (variant ? " empty mask" : " random mask");
      }
    }
}

// An all-keep mask scales every valid element: with p = 0.5 (scale 2, exact) h and the gradients
// are exactly twice those without dropout (f32: doubling is exact; f16 / bf16: doubling a stored
// value is exact too); with p = 0.3 (an inexact scale) the contract's f32 rounding, bit for bit.
TEST(TransducerJoint, AllKeepMaskScalesEveryValidElement) {
  for (DType dt : kDtypes)
    for (int mode = 0; mode < 4; ++mode) {
      Case c(dt, 3, 5, 4, 37, 31);
      c.relu = mode & 1;
      c.packed = mode >> 1;
      c.repack();
      for (int64_t i = 0; i < c.mask.size(); ++i) c.mask.set(i, 1.0);
      ASSERT_EQ(c.forward(), 0);
      ASSERT_EQ(c.backward(), 0);
      const Buf h0 = c.h, f0 = c.df, g0 = c.dg;
      c.drop = 0.5;
      ASSERT_EQ(c.forward(), 0);
      ASSERT_EQ(c.backward(), 0);
      // doubling commutes with the rounding to T except among f16 subnormals (a finer grid)
      auto twice = [&](double got, double was, const char* what, int64_t i) {
        if (dt == DType::f16 && std::fabs(was) < 6.2e-5) return;
        ASSERT_EQ(got, 2 * was) << opf::dtype_name(dt) << " mode " << mode << " " << what << "[" << i << "]";
      };
      int64_t scaled = 0, dont_care = 0;
      for (int64_t b = 0; b < c.nb; ++b)
        for (int64_t t = 0; t < c.nt; ++t)
          for (int64_t u = 0; u < c.nu; ++u) {
            const int64_t r = c.row(b, t, u);
            if (r < 0) continue;
            const bool valid = t < c.fl[size_t(b)] && u < c.gl[size_t(b)];
            for (int64_t k = 0; k < c.nh; ++k) {
              const int64_t i = r * c.nh + k;
              if (!valid) {  // the don't-care region stays -1, unscaled
                ASSERT_EQ(c.h.at(i), -1.0) << i;
                ++dont_care;
                continue;
              }
              twice(c.h.at(i), h0.at(i), "h", i);
              scaled += h0.at(i) != 0;
            }
          }
      EXPECT_GT(scaled, 0);
      EXPECT_EQ(dont_care > 0, !c.packed);
      for (int64_t i = 0; i < c.df.size(); ++i) twice(c.df.at(i), f0.at(i), "grad_f", i);
      for (int64_t i = 0; i < c.dg.size(); ++i) twice(c.dg.at(i), g0.at(i), "grad_g", i);
      c.drop = 0.3;
      ASSERT_EQ(c.forward(), 0);
      ASSERT_EQ(c.backward(), 0);
      c.check_forward();
      c.check_backward();
    }
}

// One row of H elements (B = T = U = 1): every element of h is its own f + g and grad_f = grad_g
// = its own gradient, so each case of the ReLU x dropout interplay is checked on its own: kept
// positive (scaled), kept negative (ReLU: 0, no gradient), dropped positive (0, no gradient),
// dropped negative (0), a kept NaN (NaN, gradient scaled), a dropped NaN and a dropped inf (NaN, as
// torch's dropout multiplies; no gradient).
TEST(TransducerJoint, DropoutWithReluElementByElement) {
  for (DType dt : kDtypes) {
    const int64_t n = 257;
    Case c(dt, 1, 1, 1, n, 41);
    c.relu = true;
    c.drop = 0.5;
    c.repack();
    c.draw_mask(0.5, 3);
    c.f.set(0, std::nan(""));
    c.mask.set(0, 1.0);
    c.f.set(1, std::nan(""));
    c.mask.set(1, 0.0);
    c.f.set(2, std::numeric_limits<double>::infinity());
    c.mask.set(2, 0.0);
    ASSERT_EQ(c.forward(), 0);
    ASSERT_EQ(c.backward(), 0);
    c.check_forward();
    c.check_backward();
    int seen[2][2] = {};  // [kept][positive]
    EXPECT_TRUE(std::isnan(c.h.at(0)) && std::isnan(c.h.at(1)) && std::isnan(c.h.at(2)));
    EXPECT_EQ(c.df.at(0), stored(dt, 2.0 * c.dh.at(0)));
    EXPECT_EQ(c.df.at(1), 0.0);
    EXPECT_EQ(c.df.at(2), 0.0);
    for (int64_t k = 3; k < n; ++k) {
      const float s = float(c.f.at(k)) + float(c.g.at(k));
      const bool kept = c.mask.at(k) != 0, positive = s > 0;
      ++seen[kept][positive];
      const double want_h = kept && positive ? stored(dt, 2.0 * double(s)) : 0.0;
      const double want_d = kept && positive ? stored(dt, 2.0 * c.dh.at(k)) : 0.0;
      EXPECT_EQ(c.h.at(k), want_h) << opf::dtype_name(dt) << " h[" << k << "] kept " << kept << " s " << s;
      EXPECT_EQ(c.df.at(k), want_d) << "grad_f[" << k << "]";
      EXPECT_EQ(c.dg.at(k), want_d) << "grad_g[" << k << "]";
    }
    for (int k = 0; k < 2; ++k)
      for (int p = 0; p < 2; ++p) EXPECT_GT(seen[k][p], 0) << "no element kept " << k << " positive " << p;
  }
}

// Unpacked, only the valid positions of the mask are read: flipping its don't-care region changes
// no bit of h, grad_f or grad_g.
TEST(TransducerJoint, MaskDontCareRegionIsNeverRead) {
  for (DType dt : kDtypes) {
    Case c(dt, 4, 9, 6, 40, 3);
    c.fl = {9, 4, 0, 7};
    c.gl = {6, 2, 5, 0};
    c.set_offsets();
    c.relu = true;
    c.drop = 0.3;
    ASSERT_EQ(c.forward(), 0);
    ASSERT_EQ(c.backward(), 0);
    c.check_forward();
    c.check_backward();
    const auto h0 = c.h.bytes, f0 = c.df.bytes, g0 = c.dg.bytes;
    int64_t flipped = 0;
    for (int64_t b = 0; b < c.nb; ++b)
      for (int64_t t = 0; t < c.nt; ++t)
        for (int64_t u = 0; u < c.nu; ++u)
          if (t >= c.fl[size_t(b)] || u >= c.gl[size_t(b)])
            for (int64_t k = 0; k < c.nh; ++k, ++flipped) {
              const int64_t i = c.row(b, t, u) * c.nh + k;
              c.mask.set(i, c.mask.at(i) != 0 ? 0.0 : 255.0);
            }
    ASSERT_GT(flipped, 0);
    ASSERT_EQ(c.forward(), 0);
    ASSERT_EQ(c.backward(), 0);
    EXPECT_TRUE(c.h.bytes == h0 && c.df.bytes == f0 && c.dg.bytes == g0) << opf::dtype_name(dt);
  }
}

// A mask of the wrong dtype or layout (or one missing when dropout is on) fails with one line
// naming the argument, in both entries, before any output is written; so does dropout_prob = 1.
TEST(TransducerJoint, BadMaskNamesTheArgument) {
  struct Bad {
    const char* what;
    bool packed;
    double drop;
    DType dt;
    opf::Shape shape;
    const char* needle;
  };
  const Bad bad[] = {
      {"f32 mask", false, 0.3, DType::f32, {2, 3, 4, 5}, "(mask) has dtype f32, expected u8"},
      {"f32 mask, no dropout", false, 0.0, DType::f32, {2, 3, 4, 5}, "(mask) has dtype f32, expected u8"},
      {"wrong H", false, 0.3, DType::u8, {2, 3, 4, 6}, "(mask) has size 6 in dim 3, expected 5"},
      {"wrong U", false, 0.0, DType::u8, {2, 3, 3, 5}, "(mask) has size 3 in dim 2, expected 4"},
      {"empty with dropout", false, 0.3, DType::u8, {0}, "(mask) has 1 dims, expected 4"},
      {"unpacked mask, packed h", true, 0.3, DType::u8, {2, 3, 4, 5}, "(mask) has 4 dims, expected 2"},
      {"not empty 1-D", false, 0.0, DType::u8, {3}, "(mask) has size 3 in dim 0, expected 0"},
  };
  for (const Bad& b : bad)
    for (int backward = 0; backward < 2; ++backward) {
      Case c(DType::f32, 2, 3, 4, 5);
      c.packed = b.packed;
      c.repack();
      c.drop = b.drop;
      c.mask = Buf(b.dt, 2 * 3 * 4 * 6);
      c.bad_mask = b.shape;
      std::string err;
      EXPECT_NE(backward ? c.backward(&err) : c.forward(&err), 0) << b.what;
      EXPECT_NE(err.find(std::string(backward ? "backward: " : "forward: ") + "argument " + (backward ? "6" : "5")),
                std::string::npos)
          << b.what << ": " << err;
      EXPECT_NE(err.find(b.needle), std::string::npos) << b.what << ": " << err;
      EXPECT_EQ(err.find('\n'), std::string::npos) << err;
      for (int64_t i = 0; !backward && i < c.h.size(); ++i)
        ASSERT_TRUE(std::isnan(c.h.at(i))) << b.what << ": h written";
      for (int64_t i = 0; backward && i < c.df.size(); ++i) ASSERT_TRUE(std::isnan(c.df.at(i))) << b.what << ": grad_f";
      for (int64_t i = 0; backward && i < c.dg.size(); ++i) ASSERT_TRUE(std::isnan(c.dg.at(i))) << b.what << ": grad_g";
    }
  Case c(DType::f32, 2, 3, 4, 5);
  for (double p : {1.0, -0.1}) {
    c.drop = p;
    std::string err;
    EXPECT_NE(c.forward(&err), 0);
    EXPECT_NE(err.find("dropout_prob"), std::string::npos) << err;
    for (int64_t i = 0; i < c.h.size(); ++i) ASSERT_TRUE(std::isnan(c.h.at(i))) << "h written";
  }
}

// Philox4x32-10 as Salmon et al. define it, written here from the paper (round multipliers
// 0xD2511F53 / 0xCD9E8D57, Weyl key increments 0x9E3779B9 / 0xBB67AE85), independent of the module's.
std::array<uint32_t, 4> philox(std::array<uint32_t, 4> x, std::array<uint32_t, 2> k) {
  for (int r = 0; r < 10; ++r) {
    if (r) k = {k[0] + 0x9E3779B9u, k[1] + 0xBB67AE85u};
    const uint64_t m0 = uint64_t(x[0]) * 0xD2511F53u, m1 = uint64_t(x[2]) * 0xCD9E8D57u;
    x = {uint32_t(m1 >> 32) ^ x[1] ^ k[0], uint32_t(m1), uint32_t(m0 >> 32) ^ x[3] ^ k[1], uint32_t(m0)};
  }
  return x;
}

TEST(TransducerJoint, PhiloxKnownAnswers) {  // Random123's kat_vectors for philox4x32_10
  using W = std::array<uint32_t, 4>;
  EXPECT_EQ(philox({0, 0, 0, 0}, {0, 0}), (W{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}), (W{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (W{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

// Every element of dropout_mask is the contract's Philox bit of its packed number (0 in the
// unpacked don't-care region), in both layouts, with about 1 - p kept; the bits do not depend on
// the thread count or the layout, and change with the seed. A generated mask drives the forward.
TEST(TransducerJoint, DropoutMaskIsPhiloxOfThePackedNumbering) {
  for (DType dt : kDtypes)
    for (double p : {0.0, 0.3, 0.9})
      for (int64_t seed : {int64_t(0), int64_t(987654321012)}) {
        std::vector<uint8_t> valid_bits[2];
        for (int packed = 0; packed < 2; ++packed) {
          SCOPED_TRACE(std::string(opf::dtype_name(dt)) + " p " + std::to_string(p) + " seed " + std::to_string(seed) +
                       " packed " + std::to_string(packed));
          Case c(dt, 4, 9, 6, 37, 17);
          c.packed = packed;
          c.drop = p;
          c.repack();
          std::string err;
          ASSERT_EQ(c.generate(seed, &err, 1), 0) << err;
          int64_t kept = 0, valid_n = 0;
          for (int64_t b = 0; b < c.nb; ++b)
            for (int64_t t = 0; t < c.nt; ++t)
              for (int64_t u = 0; u < c.nu; ++u) {
                const int64_t r = c.row(b, t, u);
                if (r < 0) continue;
                const bool valid = t < c.fl[size_t(b)] && u < c.gl[size_t(b)];
                for (int64_t k = 0; k < c.nh; ++k) {
                  const double got = c.mask.at(r * c.nh + k);
                  if (!valid) {
                    ASSERT_EQ(got, 0.0) << "don't-care " << r * c.nh + k;
                    continue;
                  }
                  const int64_t num = ((b ? c.off[size_t(b - 1)] : 0) + t * c.gl[size_t(b)] + u) * c.nh + k;
                  const auto w = philox({uint32_t(uint64_t(num) / 4), uint32_t(uint64_t(num) / 4 >> 32), 0, 0},
                                        {uint32_t(uint64_t(seed)), uint32_t(uint64_t(seed) >> 32)});
                  const double want = double(w[size_t(num % 4)]) < (1.0 - p) * 4294967296.0 ? 1.0 : 0.0;
                  ASSERT_EQ(got, want) << "element " << r * c.nh + k << " (number " << num << ")";
                  kept += got != 0;
                  ++valid_n;
                  valid_bits[packed].push_back(uint8_t(got));
                }
              }
          ASSERT_GT(valid_n, 1000);
          if (p == 0) {
            EXPECT_EQ(kept, valid_n);
          }
          const double frac = double(kept) / double(valid_n), sd = std::sqrt(p * (1 - p) / double(valid_n));
          EXPECT_NEAR(frac, 1 - p, 5 * sd + 1e-12) << kept << " of " << valid_n;
          const auto one = c.mask.bytes;
          for (int threads : {2, 3, 4}) {
            ASSERT_EQ(c.generate(seed, &err, threads), 0) << err;
            EXPECT_TRUE(c.mask.bytes == one) << threads << " threads";
          }
          if (p > 0) {
            ASSERT_EQ(c.generate(seed + 1, &err), 0) << err;
            EXPECT_FALSE(c.mask.bytes == one) << "seed + 1 gives the same mask";
            ASSERT_EQ(c.generate(seed, &err), 0) << err;
            c.relu = true;
            ASSERT_EQ(c.forward(), 0);
            c.check_forward();
            ASSERT_EQ(c.backward(), 0);
            c.check_backward();
          }
        }
        EXPECT_TRUE(valid_bits[0] == valid_bits[1]) << "packed and unpacked masks differ";
        if (::testing::Test::HasFailure()) return;
      }
}

TEST(TransducerJoint, DropoutMaskBadArgumentsNameTheArgument) {
  struct Bad {
    const char* what;
    DType dt;
    opf::Shape shape;
    int32_t f_len0;
    const char* needle;
  };
  const Bad bad[] = {
      {"f32 mask", DType::f32, {2, 3, 4, 5}, -1, "argument 5 (mask) has dtype f32, expected u8"},
      {"wrong U", DType::u8, {2, 3, 3, 5}, -1, "argument 5 (mask) has size 3 in dim 2, expected 4"},
      {"f_len past T", DType::u8, {2, 3, 4, 5}, 4, "f_len[0] = 4 is outside [0, 3] (T of f)"},
  };
  for (const Bad& b : bad) {
    Case c(DType::f32, 2, 3, 4, 5);
    c.drop = 0.5;
    if (b.f_len0 >= 0) c.fl[0] = b.f_len0;
    c.mask = Buf(b.dt, 2 * 3 * 4 * 6);
    c.bad_mask = b.shape;
    std::string err;
    EXPECT_NE(c.generate(1, &err), 0) << b.what;
    EXPECT_NE(err.find(std::string("dropout_mask: ") + b.needle), std::string::npos) << b.what << ": " << err;
    EXPECT_EQ(err.find('\n'), std::string::npos) << err;
    for (int64_t i = 0; i < c.mask.size(); ++i) ASSERT_EQ(c.mask.at(i), 171.0) << b.what << ": mask written";
  }
}

TEST(TransducerJoint, EmptyBatchAndEmptyDims) {
  for (DType dt : kDtypes)
    for (int packed = 0; packed < 2; ++packed) {
      for (const auto& s : {std::vector<int64_t>{0, 3, 2, 8}, {2, 0, 3, 8}, {2, 3, 0, 8}, {2, 3, 4, 0}}) {
        Case c(dt, s[0], s[1], s[2], s[3]);
        c.packed = packed;
        c.repack();
        std::string err;
        ASSERT_EQ(c.forward(&err), 0) << err;
        ASSERT_EQ(c.backward(&err), 0) << err;
        c.check_forward();
        c.check_backward();
      }
    }
}

TEST(TransducerJoint, LengthsOutOfRangeNameThePositionAndWriteNothing) {
  struct Bad {
    int which;  // 0: f_len, 1: g_len, 2: batch_offset (packed)
    int64_t value;
    std::string want;
  };
  const Bad bad[] = {{0, 8, "f_len[2] = 8 is outside [0, 7] (T of f)"},
                     {0, -1, "f_len[2] = -1 is outside [0, 7] (T of f)"},
                     {1, 6, "g_len[2] = 6 is outside [0, 5] (U of g)"},
                     {1, std::numeric_limits<int32_t>::min(), "g_len[2] = -2147483648 is outside [0, 5] (U of g)"},
                     {2, 1, "batch_offset[2] = 1, expected"}};
  for (DType dt : kDtypes)
    for (const Bad& b : bad) {
      Case c(dt, 4, 7, 5, 12);
      c.packed = b.which == 2;
      c.repack();
      if (b.which == 0) c.fl[2] = int32_t(b.value);
      if (b.which == 1) c.gl[2] = int32_t(b.value);
      if (b.which == 2) c.off[2] = b.value;
      for (int backward = 0; backward < 2; ++backward) {
        std::string err;
        EXPECT_NE(backward ? c.backward(&err) : c.forward(&err), 0);
        const std::string entry = backward ? "backward: " : "forward: ";
        EXPECT_NE(err.find(entry + b.want), std::string::npos) << err;
        EXPECT_EQ(err.find('\n'), std::string::npos) << err;
        if (!backward) {
          for (int64_t i = 0; i < c.h.size(); ++i) ASSERT_TRUE(std::isnan(c.h.at(i))) << "h written despite the error";
        }
        for (int64_t i = 0; backward && i < c.df.size(); ++i) ASSERT_TRUE(std::isnan(c.df.at(i))) << "grad_f written";
        for (int64_t i = 0; backward && i < c.dg.size(); ++i) ASSERT_TRUE(std::isnan(c.dg.at(i))) << "grad_g written";
      }
    }
  // unpacked, batch_offset is not read: a wrong one is no error (apex ignores it too)
  Case c(DType::f32, 3, 4, 5, 6);
  c.off = {-5, 1000, 7};
  ASSERT_EQ(c.forward(), 0);
  c.check_forward();
}

TEST(TransducerJoint, BadArgumentsFailWithAOneLineReason) {
  Case c(DType::f32, 2, 3, 4, 5);
  std::vector<int64_t> len64(2, 1);
  Buf g16(DType::f16, 2 * 4 * 5), gwide(DType::f32, 2 * 4 * 6), h(DType::f32, 2 * 3 * 4 * 5);
  std::vector<int32_t> i32(2 * 3 * 5);
  auto run = [&](const std::function<void(opf::CallBuilder&)>& build) {
    try {
      opf::CallBuilder b(*opf::find_op("transducer_joint"), "forward");
      build(b);
      b.run(module());
      return std::string();
    } catch (const opf::Error& e) {
      return std::string(e.what());
    }
  };
  auto rest = [&](opf::CallBuilder& b) {
    b.add("f_len", c.fl.data(), DType::i32, {2}).add("g_len", c.gl.data(), DType::i32, {2});
    b.add("batch_offset", c.off.data(), DType::i64, {2});
    b.add("mask", nullptr, DType::u8, {0});  // dropout off: the empty form
  };
  struct Bad {
    const char* what;
    std::function<void(opf::CallBuilder&)> build;
    const char* needle;
  };
  const Bad bad[] = {
      {"g dtype",
       [&](opf::CallBuilder& b) {
         b.add("f", c.f.data(), DType::f32, {2, 3, 5}).add("g", g16.data(), DType::f16, {2, 4, 5});
         rest(b);
         b.add("h", h.data(), DType::f32, {2, 3, 4, 5});
       },
       "(g) has dtype f16, expected f32"},
      {"g H",
       [&](opf::CallBuilder& b) {
         b.add("f", c.f.data(), DType::f32, {2, 3, 5}).add("g", gwide.data(), DType::f32, {2, 4, 6});
         rest(b);
         b.add("h", h.data(), DType::f32, {2, 3, 4, 5});
       },
       "(g) has size 6 in dim 2, expected 5"},
      {"f int",
       [&](opf::CallBuilder& b) {
         b.add("f", i32.data(), DType::i32, {2, 3, 5}).add("g", c.g.data(), DType::f32, {2, 4, 5});
         rest(b);
         b.add("h", h.data(), DType::f32, {2, 3, 4, 5});
       },
       "(f) must be a 3-D f32/f16/bf16 tensor"},
      {"f_len i64",
       [&](opf::CallBuilder& b) {
         b.add("f", c.f.data(), DType::f32, {2, 3, 5}).add("g", c.g.data(), DType::f32, {2, 4, 5});
         b.add("f_len", len64.data(), DType::i64, {2}).add("g_len", c.gl.data(), DType::i32, {2});
         b.add("batch_offset", c.off.data(), DType::i64, {2});
         b.add("mask", nullptr, DType::u8, {0});
         b.add("h", h.data(), DType::f32, {2, 3, 4, 5});
       },
       "(f_len) has dtype i64, expected i32"},
      {"g_len length",
       [&](opf::CallBuilder& b) {
         b.add("f", c.f.data(), DType::f32, {2, 3, 5}).add("g", c.g.data(), DType::f32, {2, 4, 5});
         b.add("f_len", c.fl.data(), DType::i32, {2}).add("g_len", c.gl.data(), DType::i32, {1});
         b.add("batch_offset", c.off.data(), DType::i64, {2});
         b.add("mask", nullptr, DType::u8, {0});
         b.add("h", h.data(), DType::f32, {2, 3, 4, 5});
       },
       "(g_len) has size 1 in dim 0, expected 2"},
      {"h shape",
       [&](opf::CallBuilder& b) {
         b.add("f", c.f.data(), DType::f32, {2, 3, 5}).add("g", c.g.data(), DType::f32, {2, 4, 5});
         rest(b);
         b.add("h", h.data(), DType::f32, {2, 4, 3, 5});
       },
       "(h) has size 4 in dim 1, expected 3"},
      {"packed h rows",
       [&](opf::CallBuilder& b) {
         b.add("f", c.f.data(), DType::f32, {2, 3, 5}).add("g", c.g.data(), DType::f32, {2, 4, 5});
         rest(b);
         b.param("packed", 1);
         b.add("h", h.data(), DType::f32, {c.packed_rows() + 1, 5});
       },
       "(h) has size"},
      {"g 2-D",
       [&](opf::CallBuilder& b) {
         b.add("f", c.f.data(), DType::f32, {2, 3, 5}).add("g", c.g.data(), DType::f32, {8, 5});
         rest(b);
         b.add("h", h.data(), DType::f32, {2, 3, 4, 5});
       },
       "(g) has 2 dims, expected 3"},
  };
  for (const Bad& b : bad) {
    h.poison();
    const std::string err = run(b.build);
    EXPECT_NE(err.find(b.needle), std::string::npos) << b.what << ": " << err;
    EXPECT_EQ(err.find('\n'), std::string::npos) << err;
    for (int64_t i = 0; i < h.size(); ++i) ASSERT_TRUE(std::isnan(h.at(i))) << b.what << ": h written";
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
