// The CPU modules' storage conversions (cpu/simd-inl.h) on every Highway target this build
// compiles and this CPU runs, checked bit for bit against the scalar ones of opforge/dtype.h:
// widening all 65536 f16/bf16 patterns, and rounding special values (zeros, infinities, NaNs,
// f32 and f16 subnormals, ties, overflow to inf) plus random bit patterns through WriteRow, for
// every row length and misalignment that reaches its head, paired, single-vector and tail paths,
// with and without streaming stores. NaN payloads may differ where the hardware converts (F16C
// quiets them its own way): there only NaN-ness is compared.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/simd_convert_test.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::simd_test::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;

template <class S>
void WidenT(const uint16_t* src, float* dst, size_t n) {
  const hn::ScalableTag<float> d;
  const S* s = reinterpret_cast<const S*>(src);
  size_t j = 0;
  for (; j + hn::Lanes(d) <= n; j += hn::Lanes(d)) hn::StoreU(LoadWiden(d, s + j), d, dst + j);
  for (; j < n; ++j) dst[j] = opf::cpu::to_f32(s[j]);
}
void WidenBf16(const uint16_t* src, float* dst, size_t n) { WidenT<opf::cpu::bf16_t>(src, dst, n); }
void WidenF16(const uint16_t* src, float* dst, size_t n) { WidenT<opf::cpu::f16_t>(src, dst, n); }

template <class S>
void WriteT(const float* x, uint16_t* y, size_t n, bool stream) {
  const hn::ScalableTag<float> d;
  WriteRow(
      d, reinterpret_cast<S*>(y), n, stream, [&](size_t k) { return hn::LoadU(d, x + k); },
      [&](size_t k) { return x[k]; });
  if (stream) hwy::FlushStream();
}
void WriteBf16(const float* x, uint16_t* y, size_t n, bool stream) { WriteT<opf::cpu::bf16_t>(x, y, n, stream); }
void WriteF16(const float* x, uint16_t* y, size_t n, bool stream) { WriteT<opf::cpu::f16_t>(x, y, n, stream); }
size_t FloatLanes() { return hn::Lanes(hn::ScalableTag<float>()); }

}  // namespace opf::simd_test::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "hwy/aligned_allocator.h"
#include "hwy/tests/hwy_gtest.h"
#include "opforge/dtype.h"

namespace opf::simd_test {
HWY_EXPORT(WidenBf16);
HWY_EXPORT(WidenF16);
HWY_EXPORT(WriteBf16);
HWY_EXPORT(WriteF16);
HWY_EXPORT(FloatLanes);

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
bool f16_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu); }

class SimdConvert : public hwy::TestWithParamTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(SimdConvert);

TEST_P(SimdConvert, WidenEveryPattern) {
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = uint16_t(i);
  std::vector<float> got(all.size());
  HWY_DYNAMIC_DISPATCH(WidenBf16)(all.data(), got.data(), all.size());
  for (size_t i = 0; i < all.size(); ++i)
    ASSERT_EQ(bits_of(got[i]), bits_of(bf16_to_f32(all[i]))) << "bf16 0x" << std::hex << i;
  HWY_DYNAMIC_DISPATCH(WidenF16)(all.data(), got.data(), all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    const float want = f16_to_f32(all[i]);
    if (std::isnan(want)) ASSERT_TRUE(std::isnan(got[i])) << "f16 0x" << std::hex << i;
    else ASSERT_EQ(bits_of(got[i]), bits_of(want)) << "f16 0x" << std::hex << i;
  }
}

std::vector<float> rounding_inputs() {
  std::vector<uint32_t> u = {
      0x00000000, 0x80000000, 0x7f800000, 0xff800000,                          // zeros, infinities
      0x7fc00000, 0xffc00000, 0x7f800001, 0x7fbfffff, 0xff812345, 0x7fffffff,  // quiet/signalling NaNs
      0x00000001, 0x807fffff, 0x00400000, 0x00800000,                          // f32 subnormals, min normal
      0x7f7fffff, 0xff7fffff,                                                  // f32 max: bf16 rounds to inf
      0x3f808000, 0x3f818000, 0x3f808001, 0x3f807fff,                          // bf16 ties (to even) and neighbours
      0x477fe000, 0x477fefff, 0x477ff000, 0x47800000,  // f16 max 65504, last below inf, first to inf
      0x33800000, 0x33000000, 0x33400000, 0x33c00000,  // f16 min subnormal 2^-24, ties 2^-25, 1.5*2^-25
      0x38800000, 0x387fc000, 0x387fe000,              // f16 min normal and the subnormal/normal tie
      0x3c000000, 0x3c002000, 0x3c001000, 0x3c003000,  // f16 ties in the normal range
  };
  std::mt19937 rng(20261129);  // plus random patterns of every kind
  for (int i = 0; i < 4000; ++i) u.push_back(rng());
  std::vector<float> f;
  for (uint32_t x : u) f.push_back(float_of(x));
  return f;
}

void check_rounding(bool bf16, bool stream) {
  const std::vector<float> in = rounding_inputs();
  const size_t N = HWY_DYNAMIC_DISPATCH(FloatLanes)();
  // row lengths through every path; offsets misalign the output for the streaming head
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 4 * N + 3; ++n) lengths.push_back(n);
  lengths.push_back(in.size());
  auto out = hwy::AllocateAligned<uint16_t>(in.size() + 64);
  for (size_t offset = 0; offset < 4; ++offset)
    for (size_t n : lengths)
      for (size_t start = 0; start + n <= in.size(); start += n ? n : 1) {
        uint16_t* y = out.get() + offset;
        std::fill(out.get(), out.get() + in.size() + 64, uint16_t(0xa5a5));
        (bf16 ? HWY_DYNAMIC_DISPATCH(WriteBf16) : HWY_DYNAMIC_DISPATCH(WriteF16))(in.data() + start, y, n, stream);
        for (size_t i = 0; i < n; ++i) {
          const float x = in[start + i];
          const uint16_t want = bf16 ? f32_to_bf16(x) : f32_to_f16(x), got = y[i];
          if (!bf16 && std::isnan(x)) {
            ASSERT_TRUE(f16_is_nan(got)) << "NaN 0x" << std::hex << bits_of(x) << " -> 0x" << got;
            continue;
          }
          ASSERT_EQ(got, want) << (bf16 ? "bf16" : "f16") << " of 0x" << std::hex << bits_of(x) << std::dec
                               << " (row length " << n << ", element " << i << ", offset " << offset
                               << (stream ? ", streamed" : "") << ")";
        }
        for (size_t g = offset + n; g < in.size() + 64; ++g) ASSERT_EQ(out[g], 0xa5a5) << "wrote past the row";
        for (size_t g = 0; g < offset; ++g) ASSERT_EQ(out[g], 0xa5a5) << "wrote before the row";
        if (n == 0 || n == in.size() || start > 8 * N) break;  // a few starts per length suffice
      }
}

TEST_P(SimdConvert, RoundBf16) { check_rounding(true, false); }
TEST_P(SimdConvert, RoundBf16Streamed) { check_rounding(true, true); }
TEST_P(SimdConvert, RoundF16) { check_rounding(false, false); }
TEST_P(SimdConvert, RoundF16Streamed) { check_rounding(false, true); }

#if defined(__FLT16_MAX__)
// The portable f32 -> f16 rounding (used where the compiler lacks _Float16: clang 14, the fuzz
// build) against the compiler's own conversion: every 251st bit pattern (all exponents, both
// signs, a spread of mantissas) plus every pattern around the f16 normal/subnormal/overflow edges.
TEST(PortableF16, MatchesFloat16) {
  auto check = [](uint32_t u) {
    float x;
    std::memcpy(&x, &u, 4);
    const _Float16 h = static_cast<_Float16>(x);
    uint16_t want;
    std::memcpy(&want, &h, 2);
    const uint16_t got = opf::f32_to_f16_rne(x);
    if (std::isnan(x)) return f16_is_nan(got);
    return got == want;
  };
  for (uint64_t u = 0; u <= 0xffffffffu; u += 251) ASSERT_TRUE(check(uint32_t(u))) << std::hex << u;
  for (uint32_t edge : {0x33000000u, 0x38800000u, 0x477ff000u, 0x7f800000u})
    for (uint32_t sign : {0u, 0x80000000u})
      for (uint32_t d = 0; d < 0x4000; ++d) {
        ASSERT_TRUE(check(sign | (edge + d))) << std::hex << (sign | (edge + d));
        ASSERT_TRUE(check(sign | (edge - d))) << std::hex << (sign | (edge - d));
      }
}
#endif

}  // namespace
}  // namespace opf::simd_test
#endif  // HWY_ONCE
