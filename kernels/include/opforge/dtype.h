// Storage dtypes and their conversions. f16/bf16 are storage formats only: every kernel
// accumulates in f32 (or f64 for f64 data).
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "opforge/abi.h"

// The hardware's scalar conversions where the compiler has no _Float16 but the target has F16C
// (clang 14 JIT modules, -march=native): the branchy fallbacks below made clang's f16 kernels
// up to 2.6x slower than GCC's wherever they convert element by element (tables, row tails).
#if !defined(__FLT16_MAX__) && defined(__F16C__) && !defined(__CUDACC__)
#define OPF_F16C_SCALAR 1
#include <immintrin.h>
#endif

namespace opf {

enum class DType : int32_t {
  f32 = OPF_F32,
  f16 = OPF_F16,
  bf16 = OPF_BF16,
  f64 = OPF_F64,
  u8 = OPF_U8,
  i64 = OPF_I64,
  i32 = OPF_I32
};

constexpr std::string_view dtype_name(DType d) {
  switch (d) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f64: return "f64";
    case DType::u8: return "u8";
    case DType::i64: return "i64";
    case DType::i32: return "i32";
  }
  return "?";
}

constexpr size_t dtype_size(DType d) {
  switch (d) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::f64: return 8;
    case DType::u8: return 1;
    case DType::i64: return 8;
    case DType::i32: return 4;
  }
  return 0;
}

// Unit roundoff (half an ulp at 1.0) of the storage format.
constexpr double dtype_unit_roundoff(DType d) {
  switch (d) {
    case DType::f32: return 0x1p-24;
    case DType::f16: return 0x1p-11;
    case DType::bf16: return 0x1p-8;
    case DType::f64: return 0x1p-53;
    default: return 0.0;
  }
}

std::optional<DType> dtype_from_name(std::string_view name);

// Round-to-nearest-even conversions, NaN-preserving. Scalar: used by references, tests and
// tail loops; kernels use SIMD versions.
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
// IEEE binary16 from binary32, round to nearest even: compilers without _Float16 (clang < 15
// on x86, the fuzz build) use it; a test checks it against _Float16 where both exist.
inline uint16_t f32_to_f16_rne(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN stays NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);                        // rounds to >= 65520: infinity
  if (a < 0x38800000u) {                                                        // below 2^-14: subnormal or zero
    if (a < 0x33000000u) return sign;                                           // <= 2^-25 rounds to zero (tie to even)
    const uint32_t e = a >> 23, man = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24 bits dropped
    uint32_t h = man >> shift;
    const uint32_t rest = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1u))) ++h;
    return uint16_t(sign | h);
  }
  uint32_t h = ((a >> 13) - (112u << 10));  // rebias 127 -> 15
  const uint32_t rest = a & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent: still right
  return uint16_t(sign | h);
}
inline float f16_to_f32(uint16_t h) {
#if defined(__FLT16_MAX__) && !defined(__CUDACC__)
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return float(v);
#elif defined(OPF_F16C_SCALAR)
  return _cvtsh_ss(h);
#else
  uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: renormalise
      exp = 127 - 15 + 1;
      while (!(man & 0x400u)) {
        man <<= 1;
        --exp;
      }
      u = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
inline uint16_t f32_to_f16(float f) {
#if defined(__FLT16_MAX__) && !defined(__CUDACC__)
  _Float16 v = static_cast<_Float16>(f);
  uint16_t h;
  std::memcpy(&h, &v, 2);
  return h;
#elif defined(OPF_F16C_SCALAR)
  return uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
#else
  return f32_to_f16_rne(f);
#endif
}

// Element i of a buffer of dtype t, as a double (f16/bf16 widened exactly).
inline double load_element(DType t, const void* base, int64_t i) {
  const unsigned char* b = static_cast<const unsigned char*>(base);
  switch (t) {
    case DType::f32: {
      float v;
      std::memcpy(&v, b + 4 * i, 4);
      return v;
    }
    case DType::f16: {
      uint16_t h;
      std::memcpy(&h, b + 2 * i, 2);
      return f16_to_f32(h);
    }
    case DType::bf16: {
      uint16_t h;
      std::memcpy(&h, b + 2 * i, 2);
      return bf16_to_f32(h);
    }
    case DType::f64: {
      double v;
      std::memcpy(&v, b + 8 * i, 8);
      return v;
    }
    case DType::u8: return double(b[i]);
    case DType::i64: {
      int64_t v;
      std::memcpy(&v, b + 8 * i, 8);
      return double(v);
    }
    case DType::i32: {
      int32_t v;
      std::memcpy(&v, b + 4 * i, 4);
      return double(v);
    }
  }
  return 0;
}

// Stores v as element i of a buffer of dtype t, rounding to nearest (f16/bf16 via f32: the
// double rounding this may cause is harmless, the stored value is what counts).
inline void store_element(DType t, void* base, int64_t i, double v) {
  unsigned char* b = static_cast<unsigned char*>(base);
  switch (t) {
    case DType::f32: {
      float f = float(v);
      std::memcpy(b + 4 * i, &f, 4);
      return;
    }
    case DType::f16: {
      uint16_t h = f32_to_f16(float(v));
      std::memcpy(b + 2 * i, &h, 2);
      return;
    }
    case DType::bf16: {
      uint16_t h = f32_to_bf16(float(v));
      std::memcpy(b + 2 * i, &h, 2);
      return;
    }
    case DType::f64: std::memcpy(b + 8 * i, &v, 8); return;
    case DType::u8: b[i] = uint8_t(v); return;
    case DType::i64: {
      int64_t x = int64_t(v);
      std::memcpy(b + 8 * i, &x, 8);
      return;
    }
    case DType::i32: {
      int32_t x = int32_t(v);
      std::memcpy(b + 4 * i, &x, 4);
      return;
    }
  }
}

}  // namespace opf
