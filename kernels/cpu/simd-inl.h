// Per-target SIMD helpers for CPU op modules (Highway): f32/f16/bf16 storage <-> f32 vectors and
// lane reductions. Re-included once per Highway target by foreach_target.h, so include it after
// "hwy/highway.h" from a file that uses HWY_TARGET_INCLUDE (or with HWY_COMPILE_ONLY_STATIC).
//
// Why not plain hn::DemoteTo: Highway 1.0.3 truncates f32 -> bf16 on every target, and f32 -> f16
// on targets without F16C (SSSE3/SSE4/EMU128), and its f16 -> f32 emulation mishandles inf/NaN.
// Stores here round to nearest even, bit-identical to opf::f32_to_f16 / f32_to_bf16 (NaN stays NaN).

// A scalar loop over fewer elements than one vector (a row's head or tail beside its SIMD body).
// Clang would vectorize it (a vector loop and an epilogue for < 16 elements) and unroll that by 8
// at run time: up to half of a clang JIT module's compile time, for code that saves nothing.
// GCC does not unroll such loops; the macro is empty there and its modules stay the same bytes.
#if defined(__clang__)
#define OPF_SCALAR_LOOP _Pragma("clang loop vectorize(disable) interleave(disable) unroll(disable)")
#else
#define OPF_SCALAR_LOOP
#endif

#if defined(OPF_CPU_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef OPF_CPU_SIMD_INL_H_
#undef OPF_CPU_SIMD_INL_H_
#else
#define OPF_CPU_SIMD_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "cpu/storage.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace opf::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#undef OPF_HWY_NATIVE_F16
#if (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C)) || HWY_ARCH_ARM
#define OPF_HWY_NATIVE_F16 1  // hardware conversions, round to nearest even
#else
#define OPF_HWY_NATIVE_F16 0
#endif

// ---------------------------------------------------------------- loads (widen to f32)
template <class D>
HWY_INLINE hn::Vec<D> LoadWiden(D d, const float* HWY_RESTRICT p) {
  return hn::LoadU(d, p);
}

template <class D>
HWY_INLINE hn::Vec<D> LoadWiden(D d, const bf16_t* HWY_RESTRICT p) {
  const hn::Rebind<uint16_t, D> du16;
  const hn::RebindToUnsigned<D> du32;
  const auto bits = hn::PromoteTo(du32, hn::LoadU(du16, reinterpret_cast<const uint16_t*>(p)));
  return hn::BitCast(d, hn::ShiftLeft<16>(bits));
}

template <class D>
HWY_INLINE hn::Vec<D> LoadWiden(D d, const f16_t* HWY_RESTRICT p) {
#if OPF_HWY_NATIVE_F16
  const hn::Rebind<hwy::float16_t, D> dh;
  return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
#else
  // Exponent rebias; inf/NaN get the rest of the bias; subnormals renormalise through an f32
  // subtraction (exact).
  const hn::Rebind<uint16_t, D> du16;
  const hn::RebindToUnsigned<D> du;
  const auto h = hn::PromoteTo(du, hn::LoadU(du16, reinterpret_cast<const uint16_t*>(p)));
  const auto shifted_exp = hn::Set(du, 0x7c00u << 13);
  auto o = hn::ShiftLeft<13>(hn::And(h, hn::Set(du, 0x7fffu)));
  const auto exp = hn::And(o, shifted_exp);
  o = hn::Add(o, hn::Set(du, (127u - 15u) << 23));
  const auto inf_nan = hn::Add(o, hn::Set(du, (128u - 16u) << 23));
  const auto sub = hn::BitCast(
      du, hn::Sub(hn::BitCast(d, hn::Add(o, hn::Set(du, 1u << 23))), hn::BitCast(d, hn::Set(du, 113u << 23))));
  o = hn::IfThenElse(hn::Eq(exp, shifted_exp), inf_nan, o);
  o = hn::IfThenElse(hn::Eq(exp, hn::Zero(du)), sub, o);
  o = hn::Or(o, hn::ShiftLeft<16>(hn::And(h, hn::Set(du, 0x8000u))));
  return hn::BitCast(d, o);
#endif
}

// ---------------------------------------------------------------- stores (round to nearest even)
// RoundBits: the storage bits of v, one u16 lane per f32 lane.
template <class D>
HWY_INLINE hn::Vec<hn::Rebind<uint16_t, D>> RoundBits(D d, hn::Vec<D> v, bf16_t*) {
  const hn::RebindToUnsigned<D> du;
  const hn::RebindToSigned<D> di;
  const hn::Rebind<uint16_t, D> du16;
  const auto u = hn::BitCast(du, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
  const auto rounded = hn::ShiftRight<16>(hn::Add(hn::Add(u, hn::Set(du, 0x7fffu)), lsb));
  const auto quiet_nan = hn::Or(hn::ShiftRight<16>(u), hn::Set(du, 0x40u));
  const auto bits = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), quiet_nan, rounded);
  (void)d;
  return hn::DemoteTo(du16, hn::BitCast(di, bits));
}

template <class D>
HWY_INLINE hn::Vec<hn::Rebind<uint16_t, D>> RoundBits(D d, hn::Vec<D> v, f16_t*) {
  const hn::Rebind<uint16_t, D> du16;
#if OPF_HWY_NATIVE_F16
  (void)d;
  return hn::BitCast(du16, hn::DemoteTo(hn::Rebind<hwy::float16_t, D>(), v));
#else
  // Round to nearest even in integer arithmetic; subnormals by an f32 addition that lets the FPU
  // round (F. Giesen's float_to_half_fast3_rtne). Values above f16 max become inf, NaN -> 0x7e00.
  const hn::RebindToUnsigned<D> du;
  const hn::RebindToSigned<D> di;
  const auto bits = hn::BitCast(du, v);
  const auto sign = hn::And(bits, hn::Set(du, 0x80000000u));
  const auto mag = hn::Xor(bits, sign);
  const auto imag = hn::BitCast(di, mag);  // < 2^31: signed compares are safe
  const auto denorm_magic = hn::Set(du, ((127u - 15u) + (23u - 10u) + 1u) << 23);
  const auto big = hn::IfThenElse(hn::RebindMask(du, hn::Gt(imag, hn::Set(di, 0x7f800000))), hn::Set(du, 0x7e00u),
                                  hn::Set(du, 0x7c00u));
  const auto small = hn::Sub(hn::BitCast(du, hn::Add(hn::BitCast(d, mag), hn::BitCast(d, denorm_magic))), denorm_magic);
  const auto odd = hn::And(hn::ShiftRight<13>(mag), hn::Set(du, 1u));
  const auto normal = hn::ShiftRight<13>(hn::Add(hn::Add(mag, hn::Set(du, ((15u - 127u) << 23) + 0xfffu)), odd));
  auto o = hn::IfThenElse(hn::RebindMask(du, hn::Lt(imag, hn::Set(di, int32_t(113u << 23)))), small, normal);
  o = hn::IfThenElse(hn::RebindMask(du, hn::Gt(imag, hn::Set(di, int32_t(143u << 23) - 1))), big, o);
  o = hn::Or(o, hn::ShiftRight<16>(sign));
  return hn::DemoteTo(du16, hn::BitCast(di, o));
#endif
}

// Two f32 vectors -> one whole vector of 16-bit storage, a's lanes first: a full-width store
// (a whole cache line on AVX-512) instead of two half-width ones. bf16 keeps the rounded value in
// the upper half of each u32 lane and gathers those halves with one two-table permute (ConcatOdd),
// where RoundBits needs a shift, a saturating pack and a lane permute per vector.
// Not on HWY_SCALAR: its single-lane vectors do not split in halves.
#if HWY_TARGET != HWY_SCALAR
#define OPF_HWY_PAIR_STORES 1
template <class D>
HWY_INLINE hn::Vec<hn::Repartition<uint16_t, D>> RoundPair(D d, hn::Vec<D> a, hn::Vec<D> b, bf16_t*) {
  const hn::RebindToUnsigned<D> du;
  const hn::Repartition<uint16_t, D> d16;
  const auto round = [&](hn::Vec<D> v) {
    const auto u = hn::BitCast(du, v);
    const auto r = hn::Add(hn::Add(u, hn::Set(du, 0x7fffu)), hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u)));
    return hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), hn::Or(u, hn::Set(du, 0x400000u)), r);  // quiet NaN
  };
  (void)d;
  return hn::ConcatOdd(d16, hn::BitCast(d16, round(b)), hn::BitCast(d16, round(a)));
}
template <class D>
HWY_INLINE hn::Vec<hn::Repartition<uint16_t, D>> RoundPair(D d, hn::Vec<D> a, hn::Vec<D> b, f16_t* p) {
  return hn::Combine(hn::Repartition<uint16_t, D>(), RoundBits(d, b, p), RoundBits(d, a, p));
}
#else
#undef OPF_HWY_PAIR_STORES
#endif

template <class D>
HWY_INLINE void StoreRound(D d, hn::Vec<D> v, float* HWY_RESTRICT p) {
  hn::StoreU(v, d, p);
}
template <class D, class S>
HWY_INLINE void StoreRound(D d, hn::Vec<D> v, S* HWY_RESTRICT p) {
  const hn::Rebind<uint16_t, D> du16;
  hn::StoreU(RoundBits(d, v, p), du16, reinterpret_cast<uint16_t*>(p));
}

// Non-temporal store; p must be aligned to the stored vector's size.
template <class D>
HWY_INLINE void StreamRound(D d, hn::Vec<D> v, float* HWY_RESTRICT p) {
  hn::Stream(v, d, p);
}
template <class D, class S>
HWY_INLINE void StreamRound(D d, hn::Vec<D> v, S* HWY_RESTRICT p) {
  const hn::Rebind<uint16_t, D> du16;
  hn::Stream(RoundBits(d, v, p), du16, reinterpret_cast<uint16_t*>(p));
}

// Streaming pays off only for whole vectors of at least 16 bytes (x86_128's Stream of a partial
// vector would write past it).
template <class S>
constexpr bool kCanStream = HWY_LANES(float) * sizeof(S) >= 16 && HWY_TARGET != HWY_SCALAR;

// Writes y[0, n): vec(j) gives elements [j, j + lanes), one(j) element j (head/tail; same formula).
// stream: non-temporal stores for the vector-aligned body, so that an output larger than the
// cache does not cost a read-for-ownership per line; the caller ends with hwy::FlushStream().
template <class D, class S, class VecF, class OneF>
HWY_INLINE void WriteRow(D d, S* HWY_RESTRICT y, size_t n, bool stream, VecF&& vec, OneF&& one) {
  const size_t N = hn::Lanes(d);
  size_t j = 0;
#ifdef OPF_HWY_PAIR_STORES
  if constexpr (sizeof(S) == 2) {
    const hn::Repartition<uint16_t, D> d16;
    const auto pair = [&](size_t k) {
      const auto a = vec(k);  // (in order: vec may prefetch ahead)
      const auto b = vec(k + N);
      return RoundPair(d, a, b, y);
    };
    const uintptr_t bytes = 2 * N * sizeof(S), addr = reinterpret_cast<uintptr_t>(y);
    if (stream && bytes >= 16 && addr % sizeof(S) == 0) {
      const size_t head = std::min(n, size_t((bytes - addr % bytes) % bytes / sizeof(S)));
      OPF_SCALAR_LOOP
      for (; j < head; ++j) y[j] = from_f32<S>(one(j));
      for (; j + 2 * N <= n; j += 2 * N) hn::Stream(pair(j), d16, reinterpret_cast<uint16_t*>(y + j));
    } else {
      for (; j + 2 * N <= n; j += 2 * N) hn::StoreU(pair(j), d16, reinterpret_cast<uint16_t*>(y + j));
    }
    for (; j + N <= n; j += N) StoreRound(d, vec(j), y + j);
    OPF_SCALAR_LOOP
    for (; j < n; ++j) y[j] = from_f32<S>(one(j));
    return;
  }
#endif
  if constexpr (kCanStream<S>) {
    const uintptr_t bytes = N * sizeof(S), addr = reinterpret_cast<uintptr_t>(y);
    if (stream && addr % sizeof(S) == 0) {
      const size_t head = std::min(n, size_t((bytes - addr % bytes) % bytes / sizeof(S)));
      OPF_SCALAR_LOOP
      for (; j < head; ++j) y[j] = from_f32<S>(one(j));
      for (; j + N <= n; j += N) StreamRound(d, vec(j), y + j);
      OPF_SCALAR_LOOP
      for (; j < n; ++j) y[j] = from_f32<S>(one(j));
      return;
    }
  }
  for (; j + N <= n; j += N) StoreRound(d, vec(j), y + j);
  OPF_SCALAR_LOOP
  for (; j < n; ++j) y[j] = from_f32<S>(one(j));
}

// ---------------------------------------------------------------- reductions
template <class D>
HWY_INLINE float SumLanes(D d, hn::Vec<D> v) {
  return hn::GetLane(hn::SumOfLanes(d, v));
}
template <class D>
HWY_INLINE float MaxLanes(D d, hn::Vec<D> v) {
  return hn::GetLane(hn::MaxOfLanes(d, v));
}

// Prefetches the cache lines of p[0, n): for rows the next pass will need while this one works
// from cache (the hardware prefetcher alone leaves the row-by-row passes waiting on memory).
template <class T>
HWY_INLINE void PrefetchSpan(const T* p, size_t n) {
  const char* c = reinterpret_cast<const char*>(p);
  for (size_t b = 0; b < n * sizeof(T); b += 64) hwy::Prefetch(c + b);
}
template <class T>
HWY_INLINE void PrefetchSpanForWrite(T* p, size_t n) {
  char* c = reinterpret_cast<char*>(p);
  for (size_t b = 0; b < n * sizeof(T); b += 64) __builtin_prefetch(c + b, 1, 3);
}

// Masked-out lanes for a u8 mask row (nonzero = masked): one f32 mask per vector.
template <class D>
HWY_INLINE hn::Mask<D> LoadMaskU8(D d, const uint8_t* HWY_RESTRICT m) {
  const hn::Rebind<uint8_t, D> du8;
  const hn::RebindToUnsigned<D> du;
  return hn::RebindMask(d, hn::Ne(hn::PromoteTo(du, hn::LoadU(du8, m)), hn::Zero(du)));
}

}  // namespace opf::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // OPF_CPU_SIMD_INL_H_
