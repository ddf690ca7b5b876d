// Storage element types of CPU op modules and their scalar conversions. f16/bf16 are storage
// only: kernels widen to f32, compute, and round once (round-to-nearest-even) on the way out,
// bit-identical to opf::f32_to_f16 / opf::f32_to_bf16 (the suites round references the same way).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "opforge/abi.h"
#include "opforge/dtype.h"
#include "opforge/module.h"

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

template <class S>
S from_f32(float v);
template <>
inline float from_f32<float>(float v) {
  return v;
}
template <>
inline f16_t from_f32<f16_t>(float v) {
  return f16_t{f32_to_f16(v)};
}
template <>
inline bf16_t from_f32<bf16_t>(float v) {
  return bf16_t{f32_to_bf16(v)};
}

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

// ---- JIT specializations
// The CPU JIT compiles one module per (entry, storage dtype), at that pair's first call
// (core/loader.cpp): most of a cold compile is optimising and emitting the kernels, and a call
// needs one entry's kernels for one dtype, a sixth of a forward/backward op over f32/f16/bf16.
// Such a module is built with -DOPF_JIT_ENTRY="<entry>" -DOPF_JIT_STORAGE=<dtype>; an op's kernels
// are instantiated through run_storage<"entry">, which compiles only that pair's (everything
// without these macros: prebuilt modules, peers). The op's host code is a module of its own
// (-DOPF_JIT_HOST: no kernels at all) that the loader joins to each pair's (cpu/dispatch.h).
template <size_t N>
struct EntryName {
  char text[N];
  constexpr EntryName(const char (&s)[N]) {  // NOLINT: implicit, so run_storage<"forward"> reads well
    for (size_t i = 0; i < N; ++i) text[i] = s[i];
  }
  constexpr std::string_view view() const { return {text, N - 1}; }
};

template <EntryName E>
constexpr bool entry_compiled() {
#if defined(OPF_JIT_HOST)
  return false;  // a JIT host module holds no kernels (cpu/dispatch.h)
#elif defined(OPF_JIT_ENTRY)
  return E.view() == std::string_view(OPF_JIT_ENTRY);
#else
  return true;
#endif
}

constexpr bool storage_compiled([[maybe_unused]] int32_t dtype) {
#ifdef OPF_JIT_STORAGE
  return dtype == OPF_JIT_STORAGE;
#else
  return true;
#endif
}

// run_storage's failure in JIT modules: out of line, so a cold compile does not build the message
// inline in every entry (std::string concatenation at -O3 is a visible part of a pair's compile).
[[noreturn, gnu::noinline, gnu::cold]] inline void run_storage_missing(const char* entry, int32_t dtype) {
  char msg[200];
  std::snprintf(msg, sizeof msg,
                "entry '%s' has no %s kernels in this module (a JIT specialization for another entry or dtype?)", entry,
                dtype >= 0 && dtype < OPF_DTYPE_COUNT ? dtype_name(DType(dtype)).data() : "?");
  module::fail("%s", msg);
}

// Entry E's kernels: calls f(S{}) with the storage type of dtype. A dtype this module has no
// kernels for (not a float storage type, or not this JIT specialization's) fails the call with
// one line: it never returns without computing.
template <EntryName E, class F>
void run_storage(int32_t dtype, F&& f) {
  if constexpr (entry_compiled<E>()) {
    switch (dtype) {
      case OPF_F32:
        if constexpr (storage_compiled(OPF_F32)) return f(float{});
        break;
      case OPF_F16:
        if constexpr (storage_compiled(OPF_F16)) return f(f16_t{});
        break;
      case OPF_BF16:
        if constexpr (storage_compiled(OPF_BF16)) return f(bf16_t{});
        break;
      default: break;
    }
  }
#ifdef OPF_JIT
  run_storage_missing(E.view().data(), dtype);
#else  // prebuilt: inline as before (out of line, GCC inlined one op's kernels differently: +2-7 % instructions)
  const std::string name = dtype >= 0 && dtype < OPF_DTYPE_COUNT ? std::string(dtype_name(DType(dtype))) : "?";
  module::fail("%s", ("entry '" + std::string(E.view()) + "' has no " + name +
                      " kernels in this module (a JIT specialization for another entry or dtype?)")
                         .c_str());
#endif
}

}  // namespace opf::cpu
