// JIT variants for CPU op modules. A param whose manifest `jit_variant` names an entry splits that
// entry's JIT modules further than (entry, storage dtype) (cpu/storage.h), by the param's value:
// bool 0/1, enum the choice index, f64/i64 0 for zero and 1 otherwise (with the manifest's
// `jit_values`: the value's index in that list). The loader builds each with
// -DOPF_JIT_VARIANT="name=v,name=v". A kernel templated on such a value is instantiated through
// run_flag<"name"> (run_index<"name", count> for enums and jit_values), which compiles only this
// module's value (every value without the macro: prebuilt modules, peers). transducer_joint's forward, for one, is four
// kernels (relu x dropout), of which a call runs one: its cold JIT of forward bf16 took 1.42 s with all four, 0.83-0.87
// s with one (GCC 12 -O3).
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <string_view>
#include <type_traits>
#include <utility>

#include "cpu/storage.h"
#include "opforge/module.h"

namespace opf::cpu {

// The value of param Name this module is compiled for; -1: every value.
template <EntryName Name>
constexpr int64_t jit_variant() {
#ifdef OPF_JIT_VARIANT
  // char loops rather than std::string_view's find and substr, whose instantiation cost clang
  // 3-6 ms in every variant module
  constexpr char all[] = OPF_JIT_VARIANT;
  constexpr size_t n = sizeof(Name.text) - 1;
  for (size_t i = 0; all[i];) {
    size_t k = 0;
    while (k < n && all[i + k] == Name.text[k]) ++k;
    if (k == n && all[i + n] == '=') {
      int64_t v = 0;
      for (size_t j = i + n + 1; all[j] >= '0' && all[j] <= '9'; ++j) v = v * 10 + (all[j] - '0');
      return v;
    }
    while (all[i] && all[i] != ',') ++i;
    if (all[i] == ',') ++i;
  }
#endif
  return -1;
}

[[noreturn, gnu::noinline, gnu::cold]] inline void run_variant_missing(const char* name, int64_t compiled,
                                                                       int64_t called) {
  char msg[200];
  std::snprintf(msg, sizeof msg, "this JIT module is the variant %s=%lld, called with %s=%lld", name,
                (long long)compiled, name, (long long)called);
  module::fail("%s", msg);
}

// Calls f(std::true_type{}) or f(std::false_type{}) as `value` is, for a bool param Name (or the
// zero / nonzero variant of a numeric one). A value this JIT variant has no kernels for fails the
// call with one line. Call it outside the thread pool's tasks (they must not throw).
template <EntryName Name, class F>
void run_flag(bool value, F&& f) {
  constexpr int64_t only = jit_variant<Name>();
  if (value) {
    if constexpr (only != 0) return f(std::true_type{});
  } else {
    if constexpr (only != 1) return f(std::false_type{});
  }
  if constexpr (only != -1) run_variant_missing(Name.view().data(), only, value ? 1 : 0);
}

// Calls f(std::integral_constant<int, K>{}) for K == k in [0, Count): an enum param's choice, or
// the index of a numeric param's value in its manifest `jit_values` (Count: their number + 1, the
// last for every other value; the op maps the value to k by the same list). Otherwise as run_flag.
template <EntryName Name, int Count, class F>
void run_index(int64_t k, F&& f) {
  constexpr int64_t only = jit_variant<Name>();
  const auto one = [&]<int K>(std::integral_constant<int, K> c) {
    if constexpr (only == -1 || only == K) {
      if (k == K) {
        f(c);
        return true;
      }
    }
    return false;
  };
  const bool ran = [&]<int... K>(std::integer_sequence<int, K...>) {
    return (one(std::integral_constant<int, K>{}) || ...);
  }
  (std::make_integer_sequence<int, Count>{});
  if (!ran) run_variant_missing(Name.view().data(), only, k);
}

// The index of v in values (a numeric param's manifest `jit_values`, as the op's kernels list them),
// values.size() for any other value: run_index's k, the loader's variant (ParamInfo::jit_variant_of).
template <class T, size_t N>
constexpr int64_t value_index(const std::array<T, N>& values, T v) {
  for (size_t i = 0; i < N; ++i)
    if (values[i] == v) return int64_t(i);
  return int64_t(N);
}

}  // namespace opf::cpu
