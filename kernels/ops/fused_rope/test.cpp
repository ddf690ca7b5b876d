// fused_rope — edge cases the registry sweep cannot state (it passes dense tensors only): strided
// views (a transposed bshd t, a bshd out seen as sbhd, a strided last dim) give the dense call's
// bits; thd positions restart in every sequence (empty ones included) and match per-sequence sbhd
// calls; pass-through columns are copied exactly (d2 = 0 included); NaN reaches exactly the
// element and its rotary partner; large angles; backward is forward's transpose; bad cu_seqlens
// and other bad arguments fail with one line through the C++ API and `opforge op`, writing
// nothing. 2-D (image) entries: the reference with tables longer than the image, views, each half
// equal to the 1-D cached rotation of its axis, NaN reach, bad image sizes / d / tables. Seeded inputs (seed printed);
// outputs poisoned before every run. Runs the module the loader gives this build (prebuilt, or JIT-compiled in
// mode=jit), through the ABI.
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
#include <set>
#include <string>
#include <utility>
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
using opf::Shape;

constexpr uint64_t kSeed = 20241203;
constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();

const opf::OpInfo& op() { return *opf::find_op("fused_rope"); }
const opf_module_info* module() { return opf::Loader::instance().load(op(), "cpu").info; }

// Storage of n elements of dtype, read and written as f32.
struct Buf {
  DType t;
  std::vector<std::byte> b;
  size_t n;
  // 8 spare bytes: GCC's -Warray-bounds cannot see that a 2-element i32 buffer is never written as i64
  Buf(DType dt, size_t count, float v = kPoison) : t(dt), b(count * opf::dtype_size(dt) + 8), n(count) {
    for (size_t i = 0; i < n; ++i) set(i, v);
  }
  size_t size() const { return n; }
  size_t bytes() const { return n * opf::dtype_size(t); }
  float get(size_t i) const { return float(opf::load_element(t, b.data(), int64_t(i))); }
  void set(size_t i, double v) { opf::store_element(t, b.data(), int64_t(i), v); }
  void* data() { return b.data(); }
};

Buf random_buf(DType t, size_t n, float lo, float hi, uint64_t salt) {
  std::mt19937_64 rng(kSeed + salt);
  std::uniform_real_distribution<float> u(lo, hi);
  Buf x(t, n);
  for (size_t i = 0; i < n; ++i) x.set(i, u(rng));
  return x;
}

struct Arg {
  const char* name;
  Buf* buf;
  Shape shape;
  Shape strides = {};
};

// Runs `entry`; "" on success, else the error's one line.
std::string run(const char* entry, const std::vector<Arg>& args, int threads = 0) {
  try {
    opf::CallBuilder call(op(), entry);
    call.threads(threads);
    for (const Arg& a : args) call.add(a.name, a.buf->data(), a.buf->t, a.shape, a.strides);
    call.run(module());
  } catch (const opf::Error& e) {
    return e.what();
  }
  return "";
}

double round_to(DType t, double v) {
  const float f = float(v);
  if (t == DType::f16) return opf::f16_to_f32(opf::f32_to_f16(f));
  if (t == DType::bf16) return opf::bf16_to_f32(opf::f32_to_bf16(f));
  return f;
}

double tol(DType t) { return t == DType::f32 ? 4e-7 : t == DType::f16 ? 1e-3 : 8e-3; }

// One row's float64 reference: x[d] rotated with cos/sin (already as the op holds them).
void ref_row(bool bwd, const double* x, const double* c, const double* s, int64_t d, int64_t d2, double* y,
             double* mag) {
  const int64_t h = d2 / 2;
  for (int64_t i = 0; i < h; ++i) {
    const double lo = x[i], hi = x[i + h];
    y[i] = bwd ? lo * c[i] + hi * s[i + h] : lo * c[i] - hi * s[i];
    y[i + h] = bwd ? hi * c[i + h] - lo * s[i] : hi * c[i + h] + lo * s[i + h];
    mag[i] = std::fabs(lo * c[i]) + std::fabs(hi * s[bwd ? i + h : i]);
    mag[i + h] = std::fabs(hi * c[i + h]) + std::fabs(lo * s[bwd ? i : i + h]);
  }
  for (int64_t j = d2; j < d; ++j) y[j] = x[j], mag[j] = std::fabs(x[j]);
}

// Dense sbhd [s, b, h, d] output of `entry` checked against ref_row at every element; freqs [s, d2].
void expect_matches_reference(bool bwd, const Buf& t, const Buf& freqs, const Buf& out, int64_t s, int64_t bh,
                              int64_t d, int64_t d2) {
  std::vector<double> x(static_cast<size_t>(d)), y(static_cast<size_t>(d)), mag(static_cast<size_t>(d));
  std::vector<double> c(static_cast<size_t>(d2)), sn(static_cast<size_t>(d2));
  for (int64_t p = 0; p < s; ++p) {
    for (int64_t i = 0; i < d2; ++i) {
      c[size_t(i)] = round_to(t.t, std::cos(double(freqs.get(size_t(p * d2 + i)))));
      sn[size_t(i)] = round_to(t.t, std::sin(double(freqs.get(size_t(p * d2 + i)))));
    }
    for (int64_t r = 0; r < bh; ++r) {
      const size_t base = size_t((p * bh + r) * d);
      for (int64_t j = 0; j < d; ++j) x[size_t(j)] = t.get(base + size_t(j));
      ref_row(bwd, x.data(), c.data(), sn.data(), d, d2, y.data(), mag.data());
      for (int64_t j = 0; j < d; ++j) {
        const double got = out.get(base + size_t(j)), want = y[size_t(j)];
        if (!std::isfinite(want)) {  // an inf copied through stays that inf
          ASSERT_TRUE(got == want || (std::isnan(got) && std::isnan(want)))
              << got << " vs " << want << " at position " << p << " row " << r << " col " << j;
          continue;
        }
        ASSERT_NEAR(got, want, tol(t.t) * mag[size_t(j)] + 1e-30) << "position " << p << " row " << r << " col " << j;
      }
    }
  }
}

bool same_bits(const Buf& a, const Buf& b) { return a.b == b.b; }

// ---------------------------------------------------------------- views
// t stored as bshd [b, s, h, d] and passed as its sbhd view (PyTorch's x.transpose(0, 1)); out
// dense, then out as a bshd view too (apex's transpose_output_memory), then both with a last-dim
// stride of 2: every result has the dense call's bits, and the dense call matches the reference.
TEST(FusedRopeViews, TransposedBshdInputAndOutputGiveTheDenseBits) {
  std::printf("seed %llu\n", (unsigned long long)kSeed);
  const int64_t S = 13, B = 3, H = 5, D = 24, D2 = 16;
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (const char* entry : {"forward", "backward"}) {
      SCOPED_TRACE(std::string(opf::dtype_name(dt)) + " " + entry);
      const bool bwd = entry[0] == 'b';
      const char* in = bwd ? "grad_out" : "t";
      const char* outn = bwd ? "grad_t" : "out";
      const size_t n = size_t(S * B * H * D);
      Buf dense = random_buf(dt, n, -1, 1, 1), freqs = random_buf(DType::f32, size_t(S * D2), -12, 12, 2);
      Buf bshd(dt, n);  // the same values in bshd memory
      for (int64_t s = 0; s < S; ++s)
        for (int64_t b = 0; b < B; ++b)
          for (int64_t k = 0; k < H * D; ++k)
            bshd.set(size_t((b * S + s) * H * D + k), dense.get(size_t((s * B + b) * H * D + k)));
      const Shape shape{S, B, H, D}, fshape{S, 1, 1, D2}, view{H * D, S * H * D, D, 1};
      Buf want(dt, n);
      ASSERT_EQ(run(entry, {{in, &dense, shape}, {"freqs", &freqs, fshape}, {outn, &want, shape}}), "");
      expect_matches_reference(bwd, dense, freqs, want, S, B * H, D, D2);

      Buf got(dt, n);
      ASSERT_EQ(run(entry, {{in, &bshd, shape, view}, {"freqs", &freqs, fshape}, {outn, &got, shape}}), "");
      EXPECT_TRUE(same_bits(got, want)) << "transposed input";

      Buf got_bshd(dt, n);
      ASSERT_EQ(run(entry, {{in, &bshd, shape, view}, {"freqs", &freqs, fshape}, {outn, &got_bshd, shape, view}}), "");
      for (int64_t s = 0; s < S; ++s)
        for (int64_t b = 0; b < B; ++b)
          for (int64_t k = 0; k < H * D; ++k)
            ASSERT_EQ(got_bshd.get(size_t((b * S + s) * H * D + k)), want.get(size_t((s * B + b) * H * D + k)))
                << "bshd output at s " << s << " b " << b << " k " << k;

      // last dim strided: every other element of a [S, B, H, 2D] buffer, in and out
      Buf wide(dt, 2 * n, 7.0f), wide_out(dt, 2 * n, 5.0f);
      for (size_t i = 0; i < n; ++i) wide.set(2 * i, dense.get(i));
      const Shape strided{B * H * 2 * D, H * 2 * D, 2 * D, 2};
      ASSERT_EQ(run(entry, {{in, &wide, shape, strided}, {"freqs", &freqs, fshape}, {outn, &wide_out, shape, strided}}),
                "");
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(wide_out.get(2 * i), want.get(i)) << i;
        ASSERT_EQ(wide_out.get(2 * i + 1), 5.0f) << "a gap of the output view was written at " << 2 * i + 1;
      }
    }
}

// out == t (same memory, same strides: PyTorch's in-place form) gives the out-of-place bits: each
// row is read whole before it is written. d = 40 takes the path through a scratch row; d = 128,
// d2 = 64 the path straight into the output (whole vector groups, up to 2 x 16 lanes).
TEST(FusedRopeViews, InPlaceGivesTheOutOfPlaceBits) {
  for (const auto& [D, D2] : {std::pair<int64_t, int64_t>{40, 32}, {128, 64}})
    for (DType dt : {DType::bf16, DType::f32})
      for (const char* entry : {"forward", "backward"}) {
        SCOPED_TRACE(std::string(opf::dtype_name(dt)) + " " + entry + " d=" + std::to_string(D));
        const int64_t S = 6, B = 2, H = 3, n = S * B * H * D;
        const bool bwd = entry[0] == 'b';
        Buf t = random_buf(dt, size_t(n), -1, 1, 21), f = random_buf(DType::f32, size_t(S * D2), -12, 12, 22);
        Buf want(dt, size_t(n));
        const Shape shape{S, B, H, D}, fshape{S, 1, 1, D2};
        ASSERT_EQ(
            run(entry,
                {{bwd ? "grad_out" : "t", &t, shape}, {"freqs", &f, fshape}, {bwd ? "grad_t" : "out", &want, shape}}),
            "");
        ASSERT_EQ(
            run(entry,
                {{bwd ? "grad_out" : "t", &t, shape}, {"freqs", &f, fshape}, {bwd ? "grad_t" : "out", &t, shape}}),
            "");
        EXPECT_TRUE(same_bits(t, want));
      }
}

// ---------------------------------------------------------------- thd
// Packed sequences (one empty, one of length 1, freqs longer than the longest): each sequence's
// rows equal an sbhd call on that sequence alone (positions from 0), bit for bit, at any threads.
TEST(FusedRopeThd, PositionsRestartInEverySequence) {
  const int64_t H = 3, D = 20, D2 = 12, MAXS = 40;
  const std::vector<int32_t> lens = {17, 0, 1, 29, 6};
  std::vector<int32_t> cu = {0};
  for (int32_t l : lens) cu.push_back(cu.back() + l);
  const int64_t total = cu.back();
  for (DType dt : {DType::f32, DType::bf16})
    for (const char* entry : {"forward_thd", "backward_thd"}) {
      SCOPED_TRACE(std::string(opf::dtype_name(dt)) + " " + entry);
      const bool bwd = entry[0] == 'b';
      const char* in = bwd ? "grad_out" : "t";
      const char* outn = bwd ? "grad_t" : "out";
      Buf t = random_buf(dt, size_t(total * H * D), -1, 1, 3),
          freqs = random_buf(DType::f32, size_t(MAXS * D2), -12, 12, 4);
      Buf cub(DType::i32, cu.size());
      for (size_t k = 0; k < cu.size(); ++k) cub.set(k, cu[k]);
      Buf out(dt, size_t(total * H * D));
      const Shape shape{total, H, D};
      ASSERT_EQ(run(entry, {{in, &t, shape},
                            {"cu_seqlens", &cub, {int64_t(cu.size())}},
                            {"freqs", &freqs, {MAXS, 1, 1, D2}},
                            {outn, &out, shape}}),
                "");
      for (int threads : {1, 3}) {
        Buf again(dt, size_t(total * H * D));
        ASSERT_EQ(run(entry,
                      {{in, &t, shape},
                       {"cu_seqlens", &cub, {int64_t(cu.size())}},
                       {"freqs", &freqs, {MAXS, 1, 1, D2}},
                       {outn, &again, shape}},
                      threads),
                  "");
        EXPECT_TRUE(same_bits(again, out)) << threads << " threads";
      }
      const char* sbhd = bwd ? "backward" : "forward";
      for (size_t k = 0; k < lens.size(); ++k) {
        const int64_t L = lens[k];
        if (L == 0) continue;
        const size_t row = size_t(H * D), off = size_t(cu[k]) * row;
        Buf ts(dt, size_t(L) * row), fs(DType::f32, size_t(L * D2)), os(dt, size_t(L) * row);
        std::memcpy(ts.data(), t.b.data() + off * opf::dtype_size(dt), ts.bytes());
        std::memcpy(fs.data(), freqs.data(), fs.bytes());
        ASSERT_EQ(run(sbhd, {{in, &ts, {L, 1, H, D}}, {"freqs", &fs, {L, 1, 1, D2}}, {outn, &os, {L, 1, H, D}}}), "");
        EXPECT_EQ(std::memcmp(os.data(), out.b.data() + off * opf::dtype_size(dt), os.bytes()), 0) << "sequence " << k;
        expect_matches_reference(bwd, ts, fs, os, L, H, D, D2);
      }
    }
}

// ---------------------------------------------------------------- values
// Columns >= d2 are the input's bits, for d2 < d and for d2 = 0 (nothing rotated); one row of one
// pair (d = d2 = 2) and a one-element row (d = 1, d2 = 0) included.
TEST(FusedRopeValues, PassThroughColumnsAreCopiedExactly) {
  struct Shape5 {
    int64_t s, b, h, d, d2;
  };
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (const Shape5 sh : {Shape5{1, 1, 1, 2, 2}, Shape5{1, 1, 1, 1, 0}, Shape5{3, 2, 7, 131, 2},
                            Shape5{5, 1, 3, 64, 0}, Shape5{2, 3, 1, 97, 94}}) {
      SCOPED_TRACE(std::string(opf::dtype_name(dt)) + " d " + std::to_string(sh.d) + " d2 " + std::to_string(sh.d2));
      const size_t n = size_t(sh.s * sh.b * sh.h * sh.d);
      Buf t = random_buf(dt, n, -3, 3, 5), freqs = random_buf(DType::f32, size_t(sh.s * sh.d2), -12, 12, 6), out(dt, n);
      t.set(n - 1, std::numeric_limits<float>::infinity());  // copied through or rotated: never lost
      const Shape shape{sh.s, sh.b, sh.h, sh.d};
      ASSERT_EQ(run("forward", {{"t", &t, shape}, {"freqs", &freqs, {sh.s, 1, 1, sh.d2}}, {"out", &out, shape}}), "");
      for (size_t r = 0; r < n / size_t(sh.d); ++r)
        for (int64_t j = sh.d2; j < sh.d; ++j) {
          const size_t i = r * size_t(sh.d) + size_t(j);
          ASSERT_EQ(std::memcmp(out.b.data() + i * opf::dtype_size(dt), t.b.data() + i * opf::dtype_size(dt),
                                opf::dtype_size(dt)),
                    0)
              << "row " << r << " col " << j;
        }
      if (sh.d2 > 0 && sh.d > sh.d2) expect_matches_reference(false, t, freqs, out, sh.s, sh.b * sh.h, sh.d, sh.d2);
    }
}

// A NaN in t reaches its own element and, in the rotary part, its partner i +- d2/2; nothing else.
TEST(FusedRopeValues, NanReachesTheElementAndItsPartnerOnly) {
  const int64_t S = 4, B = 2, H = 3, D = 21, D2 = 14, n = S * B * H * D;
  Buf t = random_buf(DType::f32, size_t(n), -1, 1, 7), freqs = random_buf(DType::f32, size_t(S * D2), -12, 12, 8);
  const int64_t row = (2 * B + 1) * H + 2;  // s 2, b 1, h 2
  const std::set<int64_t> nan_cols = {3, 15};
  for (int64_t j : nan_cols) t.set(size_t(row * D + j), std::nan(""));
  for (const char* entry : {"forward", "backward"}) {
    const bool bwd = entry[0] == 'b';
    Buf out(DType::f32, size_t(n));
    ASSERT_EQ(run(entry, {{bwd ? "grad_out" : "t", &t, {S, B, H, D}},
                          {"freqs", &freqs, {S, 1, 1, D2}},
                          {bwd ? "grad_t" : "out", &out, {S, B, H, D}}}),
              "");
    for (int64_t i = 0; i < n; ++i) {
      const bool want = i / D == row && (i % D == 3 || i % D == 3 + D2 / 2 || i % D == 15);
      EXPECT_EQ(std::isnan(out.get(size_t(i))), want) << entry << " element " << i;
    }
  }
}

// Angles of thousands of radians (late positions times low-index inverse frequencies): sincosf's
// range reduction must hold up against the float64 reference.
TEST(FusedRopeValues, LargeAnglesMatchTheReference) {
  const int64_t S = 6, D = 32;
  Buf t = random_buf(DType::f32, size_t(S * D), -1, 1, 9),
      freqs = random_buf(DType::f32, size_t(S * D), 1000, 9000, 10);
  for (const char* entry : {"forward", "backward"}) {
    const bool bwd = entry[0] == 'b';
    Buf out(DType::f32, size_t(S * D));
    ASSERT_EQ(run(entry, {{bwd ? "grad_out" : "t", &t, {S, 1, 1, D}},
                          {"freqs", &freqs, {S, 1, 1, D}},
                          {bwd ? "grad_t" : "out", &out, {S, 1, 1, D}}}),
              "");
    expect_matches_reference(bwd, t, freqs, out, S, 1, D, D);
  }
}

// freqs as models build them, cat(f, f) with f = position * inv_freq (the halves share angles),
// in sbhd and thd: the reference at every element.
TEST(FusedRopeValues, ModelStyleFreqsMatchTheReference) {
  const int64_t S = 33, D = 48, D2 = 32, H = 2;
  Buf freqs(DType::f32, size_t(S * D2));
  for (int64_t p = 0; p < S; ++p)
    for (int64_t i = 0; i < D2 / 2; ++i) {
      const float f = float(p) * std::pow(10000.0f, -2.0f * float(i) / float(D2));
      freqs.set(size_t(p * D2 + i), f);
      freqs.set(size_t(p * D2 + D2 / 2 + i), f);
    }
  for (DType dt : {DType::f32, DType::f16})
    for (const char* entry : {"forward", "backward"}) {
      SCOPED_TRACE(std::string(opf::dtype_name(dt)) + " " + entry);
      const bool bwd = entry[0] == 'b';
      Buf t = random_buf(dt, size_t(S * H * D), -1, 1, 23), out(dt, size_t(S * H * D));
      ASSERT_EQ(run(entry, {{bwd ? "grad_out" : "t", &t, {S, 1, H, D}},
                            {"freqs", &freqs, {S, 1, 1, D2}},
                            {bwd ? "grad_t" : "out", &out, {S, 1, H, D}}}),
                "");
      expect_matches_reference(bwd, t, freqs, out, S, H, D, D2);
      Buf cu(DType::i32, 2, 0.0f), packed(dt, size_t(S * H * D));
      cu.set(1, double(S));
      ASSERT_EQ(run(bwd ? "backward_thd" : "forward_thd", {{bwd ? "grad_out" : "t", &t, {S, H, D}},
                                                           {"cu_seqlens", &cu, {2}},
                                                           {"freqs", &freqs, {S, 1, 1, D2}},
                                                           {bwd ? "grad_t" : "out", &packed, {S, H, D}}}),
                "");
      EXPECT_TRUE(same_bits(packed, out));
    }
}

// backward is the transpose of forward: <y, F x> = <B y, x> (float64 sums of f32 results), and the
// cached entries with cos/sin from freqs give the freqs entries' bits.
TEST(FusedRopeValues, BackwardIsTheTransposeAndCachedMatchesFreqs) {
  const int64_t S = 9, B = 2, H = 4, D = 40, D2 = 30, n = S * B * H * D;
  Buf x = random_buf(DType::f32, size_t(n), -1, 1, 11), y = random_buf(DType::f32, size_t(n), -1, 1, 12);
  Buf freqs = random_buf(DType::f32, size_t(S * D2), -12, 12, 13);
  const Shape shape{S, B, H, D}, fshape{S, 1, 1, D2};
  Buf fx(DType::f32, size_t(n)), by(DType::f32, size_t(n));
  ASSERT_EQ(run("forward", {{"t", &x, shape}, {"freqs", &freqs, fshape}, {"out", &fx, shape}}), "");
  ASSERT_EQ(run("backward", {{"grad_out", &y, shape}, {"freqs", &freqs, fshape}, {"grad_t", &by, shape}}), "");
  double lhs = 0, rhs = 0, mag = 0;
  for (size_t i = 0; i < size_t(n); ++i) {
    lhs += double(y.get(i)) * fx.get(i);
    rhs += double(by.get(i)) * x.get(i);
    mag += std::fabs(double(y.get(i)) * x.get(i));
  }
  EXPECT_NEAR(lhs, rhs, 1e-6 * mag);

  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string(opf::dtype_name(dt)));
    Buf t(dt, size_t(n)), cs(dt, size_t(S * D2)), sn(dt, size_t(S * D2));
    for (size_t i = 0; i < size_t(n); ++i) t.set(i, x.get(i));
    for (size_t k = 0; k < size_t(S * D2); ++k) {
      float sv, cv;
      ::sincosf(freqs.get(k), &sv, &cv);
      cs.set(k, cv);
      sn.set(k, sv);
    }
    for (const char* entry : {"forward", "backward"}) {
      const bool bwd = entry[0] == 'b';
      const char* in = bwd ? "grad_out" : "t";
      const char* outn = bwd ? "grad_t" : "out";
      Buf a(dt, size_t(n)), c(dt, size_t(n));
      ASSERT_EQ(run(entry, {{in, &t, shape}, {"freqs", &freqs, fshape}, {outn, &a, shape}}), "");
      ASSERT_EQ(run(bwd ? "backward_cached" : "forward_cached",
                    {{in, &t, shape}, {"cos", &cs, fshape}, {"sin", &sn, fshape}, {outn, &c, shape}}),
                "");
      EXPECT_TRUE(same_bits(a, c)) << entry;
    }
  }
}

TEST(FusedRopeValues, EmptyTensors) {
  for (const Shape& shape : {Shape{0, 2, 3, 8}, Shape{4, 0, 3, 8}, Shape{4, 2, 0, 8}}) {
    Buf t(DType::f32, 0), freqs = random_buf(DType::f32, size_t(shape[0] * 8), -1, 1, 14), out(DType::f32, 0);
    EXPECT_EQ(run("forward", {{"t", &t, shape}, {"freqs", &freqs, {shape[0], 1, 1, 8}}, {"out", &out, shape}}), "");
  }
  Buf t(DType::f32, 0), cu(DType::i32, 1, 0.0f), freqs(DType::f32, 0), out(DType::f32, 0);
  EXPECT_EQ(
      run("forward_thd",
          {{"t", &t, {0, 2, 8}}, {"cu_seqlens", &cu, {1}}, {"freqs", &freqs, {0, 1, 1, 8}}, {"out", &out, {0, 2, 8}}}),
      "");
}

// ---------------------------------------------------------------- bad input
void expect_one_line(const std::string& err) { EXPECT_EQ(err.find('\n'), std::string::npos) << err; }

TEST(FusedRopeBad, CuSeqlensOutOfOrderOrRangeFailsBeforeAnyWrite) {
  const int64_t H = 2, D = 8, total = 10;
  struct Case {
    std::vector<int32_t> cu;
    const char* text;
  };
  const Case cases[] = {
      {{0, 6, 4, 10}, "argument 1 (cu_seqlens) decreases at index 2 (4 after 6)"},
      {{0, 4, 12, 10}, "argument 1 (cu_seqlens) has 12 at index 2, past the 10 tokens of t"},
      {{0, 4, 2000000000, 10}, "argument 1 (cu_seqlens) has 2000000000 at index 2, past the 10 tokens of t"},
      {{0, 4, 9}, "argument 1 (cu_seqlens) ends at 9, expected the 10 tokens of t"},
      {{1, 4, 10}, "argument 1 (cu_seqlens) starts at 1, expected 0"},
      {{-3, 4, 10}, "argument 1 (cu_seqlens) starts at -3, expected 0"},
      {{0, 4, 10, -1}, "argument 1 (cu_seqlens) decreases at index 3 (-1 after 10)"},
      {{}, "argument 1 (cu_seqlens) must be a 1-D i32 tensor [B + 1] with at least one offset"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    Buf t = random_buf(DType::f32, size_t(total * H * D), -1, 1, 15), freqs = random_buf(DType::f32, 64, -1, 1, 16);
    Buf cu(DType::i32, std::max<size_t>(c.cu.size(), 1), 0.0f), out(DType::f32, size_t(total * H * D));
    for (size_t k = 0; k < c.cu.size(); ++k) cu.set(k, c.cu[k]);
    const std::string err = run("backward_thd", {{"grad_out", &t, {total, H, D}},
                                                 {"cu_seqlens", &cu, {int64_t(c.cu.size())}},
                                                 {"freqs", &freqs, {8, 1, 1, D}},
                                                 {"grad_t", &out, {total, H, D}}});
    EXPECT_NE(err.find(std::string("backward_thd: ") + c.text), std::string::npos) << err;
    expect_one_line(err);
    for (size_t i = 0; i < out.size(); ++i) ASSERT_TRUE(std::isnan(out.get(i))) << "output written despite the error";
  }
}

TEST(FusedRopeBad, OtherArgumentsFailWithAOneLineReason) {
  const int64_t S = 4, B = 2, H = 3, D = 8, n = S * B * H * D;
  Buf t = random_buf(DType::f32, size_t(n), -1, 1, 17), f = random_buf(DType::f32, size_t(S * D), -1, 1, 18);
  Buf f16(DType::f16, size_t(S * D), 0.5f), out(DType::f32, size_t(n)), outh(DType::f16, size_t(n));
  const Shape shape{S, B, H, D};
  struct Case {
    const char* entry;
    std::vector<Arg> args;
    const char* text;
  };
  Buf cu(DType::i32, 3, 0.0f);
  cu.set(1, 5);
  cu.set(2, 8);
  const std::vector<Case> cases = {
      {"forward",
       {{"t", &t, shape}, {"freqs", &f, {S, 1, 1, 7}}, {"out", &out, shape}},
       "forward: argument 1 (freqs) has 7 rotary columns; d2 must be even and at most d = 8"},
      {"forward",
       {{"t", &t, {S, B, H, 6}}, {"freqs", &f, {S, 1, 1, 8}}, {"out", &out, {S, B, H, 6}}},
       "forward: argument 1 (freqs) has 8 rotary columns; d2 must be even and at most d = 6"},
      {"forward",
       {{"t", &t, shape}, {"freqs", &f16, {S, 1, 1, D}}, {"out", &out, shape}},
       "forward: argument 1 (freqs) has dtype f16, expected f32"},
      {"forward",
       {{"t", &t, shape}, {"freqs", &f, {S - 1, 1, 1, D}}, {"out", &out, shape}},
       "forward: argument 1 (freqs) has size 3 in dim 0, expected 4"},
      {"backward",
       {{"grad_out", &t, shape}, {"freqs", &f, {S, 1, 1, D}}, {"grad_t", &outh, shape}},
       "backward: argument 2 (grad_t) has dtype f16, expected f32"},
      {"forward",
       {{"t", &t, shape}, {"freqs", &f, {S, 1, 1, D}}, {"out", &out, {S, B, H + 1, D}}},
       "forward: argument 2 (out) has size 4 in dim 2, expected 3"},
      {"forward",
       {{"t", &t, shape}, {"freqs", &f, {S, 1, 1, D}}, {"out", &out, shape, {B * H * D, 0, D, 1}}},
       "forward: argument 2 (out) has stride 0 in dim 1; an output view needs positive strides"},
      {"forward",
       {{"t", &t, shape}, {"freqs", &f, {S, 1, 1, D}}, {"out", &out, shape, {H * D, H * D, D, 1}}},
       "forward: argument 2 (out) overlaps itself (stride 24 in dim 1)"},
      {"forward",
       {{"t", &t, shape}, {"freqs", &f, {S, 1, 1, D}}, {"out", &t, shape, {H * D, S * H * D, D, 1}}},
       "forward: argument 2 (out) overlaps argument 0 (t) with another layout"},
      {"forward_cached",
       {{"t", &t, shape}, {"cos", &f, {S, 1, 1, D}}, {"sin", &f, {S, 1, 1, 6}}, {"out", &out, shape}},
       "forward_cached: argument 2 (sin) has 6 columns, expected 8 as cos"},
      {"forward_cached",
       {{"t", &t, shape}, {"cos", &f16, {S, 1, 1, D}}, {"sin", &f, {S, 1, 1, D}}, {"out", &out, shape}},
       "forward_cached: argument 1 (cos) has dtype f16, expected f32"},
      {"forward_thd",
       {{"t", &t, {8, H, D}}, {"cu_seqlens", &cu, {3}}, {"freqs", &f, {4, 1, 1, D}}, {"out", &out, {8, H, D}}},
       "forward_thd: argument 2 (freqs) has 4 positions, fewer than the longest sequence in cu_seqlens (5)"},
      {"forward_thd",
       {{"t", &t, shape}, {"cu_seqlens", &cu, {3}}, {"freqs", &f, {S, 1, 1, D}}, {"out", &out, shape}},
       "forward_thd: argument 0 (t) must be a 3-D f32/f16/bf16 tensor [total, h, d]"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    for (size_t i = 0; i < out.size(); ++i) out.set(i, kPoison);
    const std::string err = run(c.entry, c.args);
    EXPECT_NE(err.find(c.text), std::string::npos) << err;
    expect_one_line(err);
    for (size_t i = 0; i < out.size(); ++i) ASSERT_TRUE(std::isnan(out.get(i))) << "output written despite the error";
  }
  opf_call raw{"sideways", nullptr, 0, nullptr, 0, nullptr, nullptr};
  char msg[256] = "";
  EXPECT_NE(module()->run(module(), &raw, msg, sizeof msg), 0);
  EXPECT_NE(std::string(msg).find("unknown entry 'sideways'"), std::string::npos) << msg;
}

// ---------------------------------------------------------------- 2-D (image)
// Runs a 2-D entry with params img_h, img_w; "" on success, else the error's one line.
std::string run_2d(const char* entry, const std::vector<Arg>& args, int64_t img_h, int64_t img_w, int threads = 0) {
  try {
    opf::CallBuilder call(op(), entry);
    call.threads(threads);
    call.param("img_h", double(img_h)).param("img_w", double(img_w));
    for (const Arg& a : args) call.add(a.name, a.buf->data(), a.buf->t, a.shape, a.strides);
    call.run(module());
  } catch (const opf::Error& e) {
    return e.what();
  }
  return "";
}

// t [b, s, h, d] (dense) with tables [rows, d / 2]: out checked at every element against the
// float64 rotate-half of each half (row y = k / img_w of cos_h/sin_h, column x = k % img_w of
// cos_w/sin_w), the tables as stored (T or f32).
void expect_2d_matches_reference(bool bwd, const Buf& t, const Buf* tab[4], const Buf& out, int64_t b, int64_t s,
                                 int64_t h, int64_t d, int64_t img_w) {
  const int64_t q = d / 2;
  std::vector<double> x(static_cast<size_t>(d)), y(x), mag(x), c(static_cast<size_t>(d)), sn(c);
  for (int64_t r = 0; r < b * s * h; ++r) {
    const int64_t k = (r / h) % s, rows[2] = {k / img_w, k % img_w};
    for (int half = 0; half < 2; ++half)
      for (int64_t i = 0; i < q; ++i) {
        c[size_t(half * q + i)] = tab[size_t(2 * half)]->get(size_t(rows[half] * q + i));
        sn[size_t(half * q + i)] = tab[size_t(2 * half + 1)]->get(size_t(rows[half] * q + i));
      }
    for (int64_t j = 0; j < d; ++j) x[size_t(j)] = t.get(size_t(r * d + j));
    ref_row(bwd, x.data(), c.data(), sn.data(), q, q, y.data(), mag.data());
    ref_row(bwd, x.data() + q, c.data() + q, sn.data() + q, q, q, y.data() + q, mag.data() + q);
    for (int64_t j = 0; j < d; ++j)
      ASSERT_NEAR(out.get(size_t(r * d + j)), y[size_t(j)], tol(out.t) * mag[size_t(j)] + 1e-30)
          << "row " << r << " (token " << k << ") col " << j;
  }
}

// Tables longer than the image (apex: H >= img_h, W >= img_w), in T and in f32, every dtype, a
// 9-column quarter (d = 36): the reference at every element; a transposed sbhd-memory t and a
// strided out give the dense bits; the same image with exact tables and params 0 gives them too.
TEST(FusedRope2d, MatchesTheReferenceWithLongTablesAndViews) {
  std::printf("seed %llu\n", (unsigned long long)kSeed);
  const int64_t B = 2, IH = 3, IW = 5, S = IH * IW, H = 3, D = 36, Q = D / 2, RH = IH + 2, RW = IW + 4;
  const size_t n = size_t(B * S * H * D);
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (const char* entry : {"forward_2d", "backward_2d", "forward_2d_f32", "backward_2d_f32"}) {
      SCOPED_TRACE(std::string(opf::dtype_name(dt)) + " " + entry);
      const bool bwd = entry[0] == 'b', f32tab = std::string(entry).ends_with("_f32");
      const char* in = bwd ? "grad_out" : "t";
      const char* outn = bwd ? "grad_t" : "out";
      const DType tt = f32tab ? DType::f32 : dt;
      Buf t = random_buf(dt, n, -1, 1, 31);
      Buf ch = random_buf(tt, size_t(RH * Q), -1, 1, 32), sh = random_buf(tt, size_t(RH * Q), -1, 1, 33);
      Buf cw = random_buf(tt, size_t(RW * Q), -1, 1, 34), sw = random_buf(tt, size_t(RW * Q), -1, 1, 35);
      const Buf* tab[4] = {&ch, &sh, &cw, &sw};
      const Shape shape{B, S, H, D};
      auto tables = [&](int64_t rh, int64_t rw) {
        return std::vector<Arg>{{"cos_h", &ch, {1, rh, 1, Q}},
                                {"sin_h", &sh, {1, rh, 1, Q}},
                                {"cos_w", &cw, {1, rw, 1, Q}},
                                {"sin_w", &sw, {1, rw, 1, Q}}};
      };
      auto args = [&](const Arg& x, const Arg& o, int64_t rh, int64_t rw) {
        std::vector<Arg> v{x};
        for (const Arg& a : tables(rh, rw)) v.push_back(a);
        v.push_back(o);
        return v;
      };
      Buf want(dt, n);
      ASSERT_EQ(run_2d(entry, args({in, &t, shape}, {outn, &want, shape}, RH, RW), IH, IW), "");
      expect_2d_matches_reference(bwd, t, tab, want, B, S, H, D, IW);

      // exact tables, params 0: the image is the tables' rows
      Buf exact(dt, n);
      ASSERT_EQ(run_2d(entry, args({in, &t, shape}, {outn, &exact, shape}, IH, IW), 0, 0), "");
      EXPECT_TRUE(same_bits(exact, want)) << "params 0 with exact tables";

      // t in [s, b, h, d] memory seen as bshd; out with a last-dim stride of 2
      Buf sbhd(dt, n), wide(dt, 2 * n, 5.0f);
      for (int64_t bb = 0; bb < B; ++bb)
        for (int64_t s = 0; s < S; ++s)
          for (int64_t k = 0; k < H * D; ++k)
            sbhd.set(size_t((s * B + bb) * H * D + k), t.get(size_t((bb * S + s) * H * D + k)));
      const Shape view{H * D, B * H * D, D, 1}, strided{S * H * 2 * D, H * 2 * D, 2 * D, 2};
      ASSERT_EQ(run_2d(entry, args({in, &sbhd, shape, view}, {outn, &wide, shape, strided}, RH, RW), IH, IW, 3), "");
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(wide.get(2 * i), want.get(i)) << i;
        ASSERT_EQ(wide.get(2 * i + 1), 5.0f) << "a gap of the output view was written at " << 2 * i + 1;
      }
    }
}

// Each half of a 2-D call is the 1-D cached rotation of that half with the row's (or column's)
// cos/sin as the position's: forward_cached / backward_cached on t[..., :q] and t[..., q:] (sbhd
// views of the bshd halves) give the same bits. One token (1 x 1 image, d = 4) and a 17 x 1 image.
TEST(FusedRope2d, EachHalfIsTheCachedRotationOfItsAxis) {
  struct Geo {
    int64_t b, ih, iw, h, d;
  };
  for (const Geo g : {Geo{1, 1, 1, 1, 4}, Geo{2, 17, 1, 2, 64}, Geo{3, 4, 6, 2, 40}})
    for (DType dt : {DType::f32, DType::bf16})
      for (const char* entry : {"forward_2d", "backward_2d"}) {
        SCOPED_TRACE(std::string(opf::dtype_name(dt)) + " " + entry + " " + std::to_string(g.ih) + "x" +
                     std::to_string(g.iw) + " d " + std::to_string(g.d));
        const bool bwd = entry[0] == 'b';
        const int64_t S = g.ih * g.iw, Q = g.d / 2, n = g.b * S * g.h * g.d;
        Buf t = random_buf(dt, size_t(n), -1, 1, 41);
        Buf ch = random_buf(dt, size_t(g.ih * Q), -1, 1, 42), sh = random_buf(dt, size_t(g.ih * Q), -1, 1, 43);
        Buf cw = random_buf(dt, size_t(g.iw * Q), -1, 1, 44), sw = random_buf(dt, size_t(g.iw * Q), -1, 1, 45);
        const Shape shape{g.b, S, g.h, g.d};
        Buf got(dt, size_t(n));
        ASSERT_EQ(run_2d(entry,
                         {{bwd ? "grad_out" : "t", &t, shape},
                          {"cos_h", &ch, {1, g.ih, 1, Q}},
                          {"sin_h", &sh, {1, g.ih, 1, Q}},
                          {"cos_w", &cw, {1, g.iw, 1, Q}},
                          {"sin_w", &sw, {1, g.iw, 1, Q}},
                          {bwd ? "grad_t" : "out", &got, shape}},
                         0, 0),
                  "");
        Buf want(dt, size_t(n));
        for (int half = 0; half < 2; ++half) {
          const Buf& c = half ? cw : ch;
          const Buf& sv = half ? sw : sh;
          Buf cs(dt, size_t(S * Q)), sn(dt, size_t(S * Q));  // per token: its row's / column's values
          for (int64_t k = 0; k < S; ++k)
            for (int64_t i = 0; i < Q; ++i) {
              const int64_t row = half ? k % g.iw : k / g.iw;
              cs.set(size_t(k * Q + i), c.get(size_t(row * Q + i)));
              sn.set(size_t(k * Q + i), sv.get(size_t(row * Q + i)));
            }
          // the half as an sbhd view [S, b, h, Q] of the bshd buffer
          const Shape hs{S, g.b, g.h, Q}, hv{g.h * g.d, S * g.h * g.d, g.d, 1};
          Buf tv = t;  // views start at the half's first column: shift the data instead of the pointer
          Buf wv(dt, size_t(n));
          if (half)
            for (int64_t i = 0; i + Q < n; ++i) tv.set(size_t(i), t.get(size_t(i + Q)));
          const char* cached = bwd ? "backward_cached" : "forward_cached";
          ASSERT_EQ(run(cached, {{bwd ? "grad_out" : "t", &tv, hs, hv},
                                 {"cos", &cs, {S, 1, 1, Q}},
                                 {"sin", &sn, {S, 1, 1, Q}},
                                 {bwd ? "grad_t" : "out", &wv, hs, hv}}),
                    "");
          for (int64_t r = 0; r < g.b * S * g.h; ++r)
            for (int64_t i = 0; i < Q; ++i) want.set(size_t(r * g.d + half * Q + i), wv.get(size_t(r * g.d + i)));
        }
        EXPECT_TRUE(same_bits(got, want));
      }
}

// A NaN in t reaches its element and its partner within the same half only.
TEST(FusedRope2d, NanStaysInItsHalfAndPartner) {
  const int64_t B = 1, IH = 2, IW = 3, S = IH * IW, H = 2, D = 16, Q = D / 2, n = B * S * H * D;
  for (const char* entry : {"forward_2d", "backward_2d"})
    for (int64_t col : {int64_t(1), Q - 1, Q + 2, D - 1}) {
      SCOPED_TRACE(std::string(entry) + " col " + std::to_string(col));
      Buf t = random_buf(DType::f32, size_t(n), -1, 1, 51);
      Buf tab = random_buf(DType::f32, size_t(IW * Q), -1, 1, 52);
      const int64_t row = 7;  // token 3 (image row 1, column 0), head 1
      t.set(size_t(row * D + col), std::nan(""));
      Buf out(DType::f32, size_t(n));
      const bool bwd = entry[0] == 'b';
      ASSERT_EQ(run_2d(entry,
                       {{bwd ? "grad_out" : "t", &t, {B, S, H, D}},
                        {"cos_h", &tab, {1, IH, 1, Q}},
                        {"sin_h", &tab, {1, IH, 1, Q}},
                        {"cos_w", &tab, {1, IW, 1, Q}},
                        {"sin_w", &tab, {1, IW, 1, Q}},
                        {bwd ? "grad_t" : "out", &out, {B, S, H, D}}},
                       IH, IW),
                "");
      const int64_t base = col < Q ? 0 : Q, partner = base + (col - base + Q / 2) % Q;
      for (int64_t i = 0; i < n; ++i) {
        const bool hit = i == row * D + col || i == row * D + partner;
        ASSERT_EQ(std::isnan(out.get(size_t(i))), hit) << "element " << i;
      }
    }
}

// Bad 2-D arguments: one line naming the argument or param; nothing written.
TEST(FusedRope2d, BadArgumentsFailWithAOneLineReason) {
  const int64_t B = 2, S = 6, H = 2, D = 8, Q = D / 2, n = B * S * H * D;
  Buf t = random_buf(DType::f32, size_t(n), -1, 1, 61), tab = random_buf(DType::f32, size_t(8 * D), -1, 1, 62);
  Buf tab16(DType::f16, size_t(8 * D), 0.5f), out(DType::f32, size_t(n));
  const Shape shape{B, S, H, D};
  auto args = [&](const char* in, Shape ts, Shape hs, Shape ws, Buf* cos_h = nullptr, Shape sin_h = {}) {
    return std::vector<Arg>{{in, &t, ts},
                            {"cos_h", cos_h ? cos_h : &tab, hs},
                            {"sin_h", &tab, sin_h.empty() ? hs : sin_h},
                            {"cos_w", &tab, ws},
                            {"sin_w", &tab, ws},
                            {in[0] == 'g' ? "grad_t" : "out", &out, ts}};
  };
  struct Case {
    const char* entry;
    std::vector<Arg> args;
    int64_t ih, iw;
    const char* text;
  };
  const std::vector<Case> cases = {
      {"forward_2d", args("t", shape, {1, 2, 1, Q}, {1, 4, 1, Q}), 2, 4,
       "forward_2d: param img_h x img_w = 2 x 4 = 8 (0 = the table's rows) does not match argument 0 (t)'s sequence "
       "dim 6"},
      {"backward_2d", args("grad_out", shape, {1, 2, 1, Q}, {1, 2, 1, Q}), 0, 0,
       "backward_2d: param img_h x img_w = 2 x 2 = 4 (0 = the table's rows) does not match argument 0 (grad_out)'s "
       "sequence dim 6"},
      {"forward_2d", args("t", {B, S, H, 6}, {1, 2, 1, 3}, {1, 3, 1, 3}), 2, 3,
       "forward_2d: argument 0 (t) has d = 6; the 2-D variant needs d divisible by 4"},
      {"forward_2d", args("t", {B, S, H, 7}, {1, 2, 1, 3}, {1, 3, 1, 3}), 2, 3,
       "forward_2d: argument 0 (t) has d = 7; the 2-D variant needs d divisible by 4"},
      {"forward_2d", args("t", shape, {1, 2, 1, D}, {1, 3, 1, Q}), 2, 3,
       "forward_2d: argument 1 (cos_h) has size 8 in dim 3, expected 4"},
      {"forward_2d", args("t", shape, {2, 1, 1, Q}, {1, 3, 1, Q}), 2, 3,
       "forward_2d: argument 1 (cos_h) has size 2 in dim 0, expected 1"},
      {"forward_2d", args("t", shape, {1, 2, Q}, {1, 3, 1, Q}), 2, 3,
       "forward_2d: argument 1 (cos_h) has 3 dims, expected 4 ([1, rows, 1, d / 2])"},
      {"forward_2d", args("t", shape, {1, 2, 1, Q}, {1, 3, 2, Q}), 2, 3,
       "forward_2d: argument 3 (cos_w) has size 2 in dim 2, expected 1"},
      {"forward_2d", args("t", shape, {1, 3, 1, Q}, {1, 3, 1, Q}, nullptr, {1, 2, 1, Q}), 2, 3,
       "forward_2d: argument 2 (sin_h) has 2 rows, expected 3 as cos_h"},
      {"forward_2d", args("t", shape, {1, 1, 1, Q}, {1, 6, 1, Q}), 2, 3,
       "forward_2d: argument 1 (cos_h) has 1 rows, fewer than the image's img_h = 2"},
      {"forward_2d", args("t", shape, {1, 2, 1, Q}, {1, 3, 1, Q}, &tab16), 2, 3,
       "forward_2d: argument 1 (cos_h) has dtype f16, expected f32"},
      {"forward_2d_f32", args("t", shape, {1, 2, 1, Q}, {1, 3, 1, Q}, &tab16), 2, 3,
       "forward_2d_f32: argument 1 (cos_h) has dtype f16, expected f32"},
      {"forward_2d", args("t", shape, {1, 2, 1, Q}, {1, 3, 1, Q}), -1, 3, "img_h"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    for (size_t i = 0; i < out.size(); ++i) out.set(i, kPoison);
    const std::string err = run_2d(c.entry, c.args, c.ih, c.iw);
    EXPECT_NE(err.find(c.text), std::string::npos) << err;
    expect_one_line(err);
    for (size_t i = 0; i < out.size(); ++i) ASSERT_TRUE(std::isnan(out.get(i))) << "output written despite the error";
  }
}

// Empty batch or heads: nothing to do, no error, nothing written.
TEST(FusedRope2d, EmptyTensors) {
  Buf t(DType::f32, 1, 1.0f), tab = random_buf(DType::f32, 16, -1, 1, 71), out(DType::f32, 1, 3.0f);
  for (const Shape& shape : {Shape{0, 6, 2, 8}, Shape{2, 6, 0, 8}}) {
    EXPECT_EQ(run_2d("forward_2d",
                     {{"t", &t, shape},
                      {"cos_h", &tab, {1, 2, 1, 4}},
                      {"sin_h", &tab, {1, 2, 1, 4}},
                      {"cos_w", &tab, {1, 3, 1, 4}},
                      {"sin_w", &tab, {1, 3, 1, 4}},
                      {"out", &out, shape}},
                     0, 0),
              "");
    EXPECT_EQ(out.get(0), 3.0f);
  }
}

// ---------------------------------------------------------------- opforge op
TEST(FusedRopeCli, BadInputsExit2WithOneLineAndWriteNothing) {
  OPF_REQUIRE_OPFORGE_EXE();
  TempDir t, io;
  const std::string D = t.path;
  Buf x = random_buf(DType::f32, size_t(10) * 2 * 8, -1, 1, 19), f = random_buf(DType::f32, size_t(10) * 8, -1, 1, 20);
  write_npy(D + "/t.npy", "<f4", {10, 2, 8}, x.data(), x.bytes());
  write_npy(D + "/freqs.npy", "<f4", {10, 1, 1, 8}, f.data(), f.bytes());
  write_npy(D + "/freqs_odd.npy", "<f4", {10, 1, 1, 7}, f.data(), size_t(10) * 7 * 4);
  const int32_t good[] = {0, 4, 10}, backwards[] = {0, 6, 4, 10}, past[] = {0, 4, 11}, short_end[] = {0, 4, 9};
  write_npy(D + "/cu.npy", "<i4", {3}, good, sizeof good);
  write_npy(D + "/cu_backwards.npy", "<i4", {4}, backwards, sizeof backwards);
  write_npy(D + "/cu_past.npy", "<i4", {3}, past, sizeof past);
  write_npy(D + "/cu_short.npy", "<i4", {3}, short_end, sizeof short_end);
  const std::vector<std::string> thd = {"--entry",           "forward_thd", "--in",
                                        "t=" + D + "/t.npy", "--in",        "freqs=" + D + "/freqs.npy"};
  auto with = [](std::vector<std::string> v, std::initializer_list<std::string> more) {
    v.insert(v.end(), more);
    return v;
  };
  const std::vector<BadCase> cases = {
      {"non-monotone cu_seqlens", with(thd, {"--in", "cu_seqlens=" + D + "/cu_backwards.npy"}), "cu_seqlens"},
      {"cu_seqlens past the tokens", with(thd, {"--in", "cu_seqlens=" + D + "/cu_past.npy"}), "cu_seqlens"},
      {"cu_seqlens short of the tokens", with(thd, {"--in", "cu_seqlens=" + D + "/cu_short.npy"}), "cu_seqlens"},
      {"missing cu_seqlens", thd, "cu_seqlens"},
      {"odd rotary columns",
       {"--entry", "forward_thd", "--in", "t=" + D + "/t.npy", "--in", "cu_seqlens=" + D + "/cu.npy", "--in",
        "freqs=" + D + "/freqs_odd.npy"},
       "freqs"},
  };
  const std::string out = D + "/out";
  expect_refused("fused_rope", cases, D, {"--out", out});
  const Result ok = opforge_op("fused_rope", io.path, with(thd, {"--in", "cu_seqlens=" + D + "/cu.npy", "--out", out}));
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_TRUE(fs::exists(out + "/out.npy"));
}

// 2-D: t [1, 6, 2, 8] with 2- and 3-row tables; an image that does not cover the sequence dim, a
// t with d not divisible by 4, and a table shorter than img_h fail with one line naming the cause.
TEST(FusedRopeCli, Bad2dInputsExit2WithOneLine) {
  OPF_REQUIRE_OPFORGE_EXE();
  TempDir t, io;
  const std::string D = t.path;
  Buf x = random_buf(DType::f32, size_t(6) * 2 * 8, -1, 1, 81), tab = random_buf(DType::f32, size_t(3) * 4, -1, 1, 82);
  write_npy(D + "/t.npy", "<f4", {1, 6, 2, 8}, x.data(), x.bytes());
  write_npy(D + "/t6.npy", "<f4", {1, 8, 2, 6}, x.data(), size_t(8) * 2 * 6 * 4);
  write_npy(D + "/h.npy", "<f4", {1, 2, 1, 4}, tab.data(), size_t(2) * 4 * 4);
  write_npy(D + "/w.npy", "<f4", {1, 3, 1, 4}, tab.data(), size_t(3) * 4 * 4);
  write_npy(D + "/h3.npy", "<f4", {1, 2, 1, 3}, tab.data(), size_t(2) * 3 * 4);
  write_npy(D + "/w3.npy", "<f4", {1, 4, 1, 3}, tab.data(), size_t(4) * 3 * 4);
  auto call = [&](const std::string& tf, const std::string& hf, const std::string& wf, std::vector<std::string> extra) {
    std::vector<std::string> v = {"--entry", "forward_2d_f32",        "--dtype", "f32",
                                  "--in",    "t=" + D + "/" + tf,     "--in",    "cos_h=" + D + "/" + hf,
                                  "--in",    "sin_h=" + D + "/" + hf, "--in",    "cos_w=" + D + "/" + wf,
                                  "--in",    "sin_w=" + D + "/" + wf, "--out",   D + "/out"};
    v.insert(v.end(), extra.begin(), extra.end());
    return v;
  };
  const std::vector<BadCase> cases = {
      {"image 2 x 2 for 6 tokens", call("t.npy", "h.npy", "w.npy", {"--param", "img_w=2"}), "img_h x img_w"},
      {"d = 6", call("t6.npy", "h3.npy", "w3.npy", {}), "argument 0 (t) has d = 6"},
      {"img_h past cos_h", call("t.npy", "h.npy", "w.npy", {"--param", "img_h=3", "--param", "img_w=2"}),
       "argument 1 (cos_h) has 2 rows"},
  };
  expect_refused("fused_rope", cases, D, {});
  const Result ok = opforge_op("fused_rope", io.path, call("t.npy", "h.npy", "w.npy", {}));
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_TRUE(fs::exists(D + "/out/out.npy"));
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
