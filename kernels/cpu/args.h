// Argument checks for CPU op modules: a call that does not match the op's ref.cpp contract fails
// with one line naming the argument and what is wrong, before any output is touched.
#pragma once

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string_view>

#include "opforge/abi.h"
#include "opforge/dtype.h"
#include "opforge/module.h"

namespace opf::cpu {

[[noreturn]] inline void failf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline void failf(const char* fmt, ...) {
  char buf[200];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  opf::module::fail("%s", buf);
}

inline const char* dtype_str(int32_t t) {
  return t >= 0 && t <= OPF_I64 ? dtype_name(DType(t)).data() : "?";
}

inline void expect_nargs(const opf_call* c, int32_t n) {
  if (c->nargs != n) failf("%s: expected %d tensor arguments, got %d", c->entry, n, c->nargs);
  if (c->args == nullptr) failf("%s: no tensor arguments", c->entry);
}

inline void expect_nparams(const opf_call* c, int32_t n) {
  if (c->nparams < n || (n > 0 && c->params == nullptr))
    failf("%s: expected %d scalar parameters, got %d", c->entry, n, c->nparams);
}

// The leading argument's dims, which the others are checked against, must not be negative.
inline void expect_dims(const opf_call* c, int i, const char* name) {
  const opf_tensor& t = c->args[i];
  for (int d = 0; d < t.ndim && d < OPF_MAX_DIMS; ++d)
    if (t.shape[d] < 0)
      failf("%s: argument %d (%s) has negative size %lld in dim %d", c->entry, i, name,
            (long long)t.shape[d], d);
}

// The leading argument: a float (f32/f16/bf16) tensor of `ndim` dims laid out as `layout` (e.g.
// "[rows, cols]") with no negative size. The other arguments are checked against its shape.
inline const opf_tensor& expect_lead(const opf_call* c, int i, const char* name, int32_t ndim,
                                     const char* layout) {
  const opf_tensor& t = c->args[i];
  if (t.ndim != ndim || !(t.dtype == OPF_F32 || t.dtype == OPF_F16 || t.dtype == OPF_BF16))
    failf("%s: argument %d (%s) must be a %d-D f32/f16/bf16 tensor %s", c->entry, i, name, ndim, layout);
  expect_dims(c, i, name);
  return t;
}

// Argument i must be named `name` in the contract, have dtype `dtype` and exactly `shape`.
inline const opf_tensor& expect_arg(const opf_call* c, int i, const char* name, int32_t dtype,
                                    std::initializer_list<int64_t> shape) {
  const opf_tensor& t = c->args[i];
  if (t.dtype != dtype)
    failf("%s: argument %d (%s) has dtype %s, expected %s", c->entry, i, name, dtype_str(t.dtype),
          dtype_str(dtype));
  if (t.ndim != int32_t(shape.size()))
    failf("%s: argument %d (%s) has %d dims, expected %zu", c->entry, i, name, t.ndim, shape.size());
  int d = 0;
  for (int64_t s : shape) {
    if (t.shape[d] != s)
      failf("%s: argument %d (%s) has size %lld in dim %d, expected %lld", c->entry, i, name,
            (long long)t.shape[d], d, (long long)s);
    ++d;
  }
  if (t.data == nullptr && shape.size() > 0) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    if (n > 0) failf("%s: argument %d (%s) has no data", c->entry, i, name);
  }
  return t;
}

}  // namespace opf::cpu
