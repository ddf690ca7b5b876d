// Storage element types of CPU op modules and their scalar conversions. f16/bf16 are storage
// only: kernels widen to f32, compute, and round once (round-to-nearest-even) on the way out,
// bit-identical to opf::f32_to_f16 / opf::f32_to_bf16 (the suites round references the same way).
#pragma once

#include <cstdint>

#include "opforge/abi.h"
#include "opforge/dtype.h"

namespace opf::cpu {

struct f16_t {
  uint16_t bits;
};
struct bf16_t {
  uint16_t bits;
};

inline float to_f32(float v) { return v; }
inline float to_f32(f16_t v) { return f16_to_f32(v.bits); }
inline float to_f32(bf16_t v) { return bf16_to_f32(v.bits); }

template <class S> S from_f32(float v);
template <> inline float from_f32<float>(float v) { return v; }
template <> inline f16_t from_f32<f16_t>(float v) { return f16_t{f32_to_f16(v)}; }
template <> inline bf16_t from_f32<bf16_t>(float v) { return bf16_t{f32_to_bf16(v)}; }

// Calls f(S{}) with the storage type of a floating dtype; returns false for other dtypes.
template <class F>
bool with_storage(int32_t dtype, F&& f) {
  switch (dtype) {
    case OPF_F32: f(float{}); return true;
    case OPF_F16: f(f16_t{}); return true;
    case OPF_BF16: f(bf16_t{}); return true;
    default: return false;
  }
}

}  // namespace opf::cpu
