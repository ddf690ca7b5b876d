// The vector exp of the CPU modules (one exp per element is most of a softmax's arithmetic) and of
// peers that must use the same exp, so that a benchmark ratio measures the fusion, not the exp.
// Per-target Highway code: include it after "hwy/highway.h" from a file that uses
// HWY_TARGET_INCLUDE (or HWY_COMPILE_ONLY_STATIC), like cpu/simd-inl.h.
#if defined(OPF_CPU_EXP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef OPF_CPU_EXP_INL_H_
#undef OPF_CPU_EXP_INL_H_
#else
#define OPF_CPU_EXP_INL_H_
#endif

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace opf::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr float kExpFloor = -87.0f;  // exp(-87) ~ 1.6e-38: the smallest normal range
constexpr float kExpCeil = 88.0f;    // exp(88) ~ 1.7e38: below FLT_MAX

// exp(t), ~1 ulp: n = round(t / ln2) by the magic-number addition, Cody-Waite reduction
// f = t - n ln2 (|f| <= ln2/2), a degree-6 minimax polynomial with p(0) = 1 exactly (relative
// error 5.5e-9 before rounding; exp(0) = 1, so one class or a uniform row stay exact), times 2^n.
// ExpClamped (any target): clamps t to [-87, 88] and builds 2^n in the exponent bits (the magic
// sum's low mantissa bits are n + 127): 14 vector ops, where a round-to-int and a saturating
// conversion to build 2^n cost ~21 on x86.
template <class D>
HWY_INLINE hn::Vec<D> ExpPoly(D d, hn::Vec<D> f) {
  auto p = hn::Set(d, 0.00138934026f);
  p = hn::MulAdd(p, f, hn::Set(d, 0.00837026257f));
  p = hn::MulAdd(p, f, hn::Set(d, 0.0416670889f));
  p = hn::MulAdd(p, f, hn::Set(d, 0.166665062f));
  p = hn::MulAdd(p, f, hn::Set(d, 0.49999997f));
  p = hn::MulAdd(p, f, hn::Set(d, 1.0f));
  return hn::MulAdd(p, f, hn::Set(d, 1.0f));
}
constexpr float kLog2e = 1.442695040888963407f, kLn2Hi = 0.693145751953125f, kLn2Lo = 1.428606765330187045e-6f;

template <class D>
HWY_INLINE hn::Vec<D> ExpClamped(D d, hn::Vec<D> t) {
  const hn::RebindToUnsigned<D> du;
  t = hn::Min(hn::Max(t, hn::Set(d, kExpFloor)), hn::Set(d, kExpCeil));
  const auto magic = hn::Set(d, 0x1.8p23f + 127.0f);
  const auto r = hn::MulAdd(t, hn::Set(d, kLog2e), magic);
  const auto n = hn::Sub(r, magic);
  const auto f = hn::MulAdd(n, hn::Set(d, -kLn2Lo), hn::MulAdd(n, hn::Set(d, -kLn2Hi), t));
  return hn::Mul(ExpPoly(d, f), hn::BitCast(d, hn::ShiftLeft<23>(hn::BitCast(du, r))));
}

// The fast exp of the main loops. AVX-512: vscalefps scales by 2^n in one op and saturates to 0
// or inf by itself, so no clamp: exp(t) is exact to ~1 ulp (subnormals included) for finite
// t <= 88, and every input it cannot do (NaN, +-inf, t far beyond exp's range where the reduction
// loses f) comes out NaN or inf, or as 0 where that is the answer. kFastFlags: a non-finite sum
// of its results flags the row for the exact path. Other targets: ExpClamped (clamp first).
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr bool kFastFlags = true;
template <class D>
HWY_INLINE hn::Vec<D> ExpFast(D d, hn::Vec<D> t) {
  const auto magic = hn::Set(d, 0x1.8p23f);
  const auto n = hn::Sub(hn::MulAdd(t, hn::Set(d, kLog2e), magic), magic);
  const auto f = hn::MulAdd(n, hn::Set(d, -kLn2Lo), hn::MulAdd(n, hn::Set(d, -kLn2Hi), t));
  return hn::Vec<D>{_mm512_scalef_ps(ExpPoly(d, f).raw, n.raw)};
}
// For the forward's sums only: one-constant reduction and a degree-5 polynomial (relative error
// <= 1.5e-7 = 2.5 u, and n * 1.9e-9 from the rounded ln2 on terms of size 2^n): 10 ops. S is a sum
// of positive terms feeding a log, so this is <= 1.5e-7 absolute on lse and the loss.
template <class D>
HWY_INLINE hn::Vec<D> ExpSum(D d, hn::Vec<D> t) {
  const auto magic = hn::Set(d, 0x1.8p23f);
  const auto n = hn::Sub(hn::MulAdd(t, hn::Set(d, kLog2e), magic), magic);
  const auto f = hn::MulAdd(n, hn::Set(d, -0.693147182464599609375f), t);
  auto p = hn::Set(d, 0.00836915057f);
  p = hn::MulAdd(p, f, hn::Set(d, 0.041917529f));
  p = hn::MulAdd(p, f, hn::Set(d, 0.166665226f));
  p = hn::MulAdd(p, f, hn::Set(d, 0.499989957f));
  p = hn::MulAdd(p, f, hn::Set(d, 1.0f));
  p = hn::MulAdd(p, f, hn::Set(d, 1.0f));
  return hn::Vec<D>{_mm512_scalef_ps(p.raw, n.raw)};
}
#else
constexpr bool kFastFlags = false;
template <class D>
HWY_INLINE hn::Vec<D> ExpSum(D d, hn::Vec<D> t) {
  return ExpClamped(d, t);
}
template <class D>
HWY_INLINE hn::Vec<D> ExpFast(D d, hn::Vec<D> t) {
  return ExpClamped(d, t);
}
#endif

}  // namespace opf::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // OPF_CPU_EXP_INL_H_
