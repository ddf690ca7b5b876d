// Argument checks for CPU op modules: a call that does not match the op's manifest entry fails
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

// JIT modules (-DOPF_JIT) keep the argument checks out of line: inlined at every argument of an
// op's call(), they made that one function a third of a cold JIT compile. Prebuilt modules inline
// them, where they cost a few hundred instructions less per call (no compile waits on them).
#ifdef OPF_JIT
#define OPF_ARG_CHECK [[gnu::noinline]]
#else
#define OPF_ARG_CHECK
#endif

// An op's host code (its cpu.cpp's #if HWY_ONCE part: argument checks, planning, dispatch) sits
// between OPF_HOST_CODE_BEGIN and OPF_HOST_CODE_END. JIT modules compile it unoptimized: it runs
// once per call, and optimizing it was up to 10-15 % of a cold JIT compile (the ops with list
// arguments, whose checks and plans are the longest; the op's host module compiles beside its
// first pair's kernels, cpu/dispatch.h). Host loops over elements that cost time (a counting sort)
// stay outside the region: END before them, BEGIN after. Prebuilt modules optimize everything.
#if defined(OPF_JIT) && defined(__clang__)
#define OPF_HOST_CODE_BEGIN _Pragma("clang optimize off")
#define OPF_HOST_CODE_END _Pragma("clang optimize on")
#elif defined(OPF_JIT) && defined(__GNUC__)
#define OPF_HOST_CODE_BEGIN _Pragma("GCC push_options") _Pragma("GCC optimize(\"O0\")")
#define OPF_HOST_CODE_END _Pragma("GCC pop_options")
#else
#define OPF_HOST_CODE_BEGIN
#define OPF_HOST_CODE_END
#endif

namespace opf::cpu {

[[noreturn]] inline void failf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline void failf(const char* fmt, ...) {
  char buf[220];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  opf::module::fail("%s", buf);
}

inline const char* dtype_str(int32_t t) { return t >= 0 && t < OPF_DTYPE_COUNT ? dtype_name(DType(t)).data() : "?"; }

inline bool is_float_storage(int32_t t) { return t == OPF_F32 || t == OPF_F16 || t == OPF_BF16; }

// A list argument's tensors. Not std::span: its C++20 concept checks cost clang 22 ms of every
// JIT module's front end, list op or not.
class TensorList {
 public:
  TensorList() = default;
  TensorList(const opf_tensor* data, size_t size) : data_(data), size_(size) {}
  const opf_tensor* begin() const { return data_; }
  const opf_tensor* end() const { return data_ + size_; }
  const opf_tensor& operator[](size_t i) const { return data_[i]; }
  const opf_tensor* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  const opf_tensor* data_ = nullptr;
  size_t size_ = 0;
};

// The call as a module reads it: argument i and param i in the entry's manifest order.
class Args {
 public:
  // The entry's argument and param counts (the manifest's).
  OPF_ARG_CHECK Args(const opf_call* c, int nargs, int nparams) : c_(c) {
    const char* e = c->entry ? c->entry : "";
    if (c->nargs != nargs || (nargs > 0 && !c->args)) failf("%s: expected %d arguments, got %d", e, nargs, c->nargs);
    if (c->nparams != nparams || (nparams > 0 && !c->params))
      failf("%s: expected %d params, got %d", e, nparams, c->nparams);
  }
  const char* entry() const { return c_->entry ? c_->entry : ""; }
  const opf_host* host() const { return c_->host; }

  // Argument i, one tensor named `name`, dense row-major unless `view`. No negative sizes.
  const opf_tensor& tensor(int i, const char* name, bool view = false) const {
    const opf_arg& a = c_->args[i];
    if (a.count != 1 || !a.tensors) failf("%s: argument %d (%s) must be one tensor, got %d", entry(), i, name, a.count);
    check_tensor(a.tensors[0], i, name, view);
    return a.tensors[0];
  }
  // Argument i, a list named `name` (may be empty).
  TensorList list(int i, const char* name, bool view = false) const {
    const opf_arg& a = c_->args[i];
    if (a.count < 0 || (a.count > 0 && !a.tensors)) failf("%s: list argument %d (%s) is malformed", entry(), i, name);
    for (int k = 0; k < a.count; ++k) check_tensor(a.tensors[k], i, name, view);
    return {a.tensors, size_t(a.count)};
  }

  double f64(int i, const char* name) const { return param(i, name, OPF_PARAM_F64).f64; }
  int64_t i64(int i, const char* name) const { return param(i, name, OPF_PARAM_I64).i64; }
  bool flag(int i, const char* name) const { return param(i, name, OPF_PARAM_BOOL).i64 != 0; }
  int64_t choice(int i, const char* name) const { return param(i, name, OPF_PARAM_ENUM).i64; }

 private:
  OPF_ARG_CHECK const opf_param& param(int i, const char* name, int32_t type) const {
    const opf_param& p = c_->params[i];
    if (p.type != type) failf("%s: param %d (%s) has the wrong type", entry(), i, name);
    return p;
  }
  OPF_ARG_CHECK void check_tensor(const opf_tensor& t, int i, const char* name, bool view) const {
    if (t.ndim < 0 || t.ndim > OPF_MAX_DIMS) failf("%s: argument %d (%s) has %d dims", entry(), i, name, t.ndim);
    int64_t expect = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
      if (t.shape[d] < 0)
        failf("%s: argument %d (%s) has negative size %lld in dim %d", entry(), i, name, (long long)t.shape[d], d);
      if (!view && t.shape[d] > 1 && t.strides[d] != expect)
        failf(
            "%s: argument %d (%s) is not contiguous (stride %lld in dim %d, expected %lld); this op takes dense "
            "tensors here",
            entry(), i, name, (long long)t.strides[d], d, (long long)expect);
      expect *= t.shape[d];
    }
  }
  const opf_call* c_;
};

inline int64_t numel(const opf_tensor& t) {
  int64_t n = 1;
  for (int d = 0; d < t.ndim; ++d) n *= t.shape[d];
  return n;
}

// The leading argument: a float (f32/f16/bf16) tensor of `ndim` dims laid out as `layout` (e.g.
// "[rows, cols]"). The other arguments are checked against its shape.
OPF_ARG_CHECK inline const opf_tensor& expect_lead(const Args& a, int i, const char* name, int32_t ndim,
                                                   const char* layout) {
  const opf_tensor& t = a.tensor(i, name);
  if (t.ndim != ndim || !is_float_storage(t.dtype))
    failf("%s: argument %d (%s) must be a %d-D f32/f16/bf16 tensor %s", a.entry(), i, name, ndim, layout);
  return t;
}

// Tensor t (argument i, `name`) must have dtype `dtype` and exactly `shape`, and data if non-empty.
OPF_ARG_CHECK inline const opf_tensor& expect_shape(const Args& a, const opf_tensor& t, int i, const char* name,
                                                    int32_t dtype, std::initializer_list<int64_t> shape) {
  if (t.dtype != dtype)
    failf("%s: argument %d (%s) has dtype %s, expected %s", a.entry(), i, name, dtype_str(t.dtype), dtype_str(dtype));
  if (t.ndim != int32_t(shape.size()))
    failf("%s: argument %d (%s) has %d dims, expected %zu", a.entry(), i, name, t.ndim, shape.size());
  int d = 0;
  int64_t n = 1;
  for (int64_t s : shape) {
    if (t.shape[d] != s)
      failf("%s: argument %d (%s) has size %lld in dim %d, expected %lld", a.entry(), i, name, (long long)t.shape[d], d,
            (long long)s);
    n *= s;
    ++d;
  }
  if (t.data == nullptr && n > 0) failf("%s: argument %d (%s) has no data", a.entry(), i, name);
  return t;
}

// Argument i: one dense tensor named `name` with dtype `dtype` and exactly `shape`.
OPF_ARG_CHECK inline const opf_tensor& expect_arg(const Args& a, int i, const char* name, int32_t dtype,
                                                  std::initializer_list<int64_t> shape) {
  return expect_shape(a, a.tensor(i, name), i, name, dtype, shape);
}

}  // namespace opf::cpu
