// Helpers for writing a CPU op module (cpu.cpp): the exported ABI table and error handling.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string_view>

#include "opforge/abi.h"

namespace opf::module {

// Thrown inside a module's run(); converted to the ABI's error string at the boundary.
struct CallError {
  char msg[256];
};

[[noreturn]] inline void fail(const char* fmt, const char* a = "", long long b = 0) {
  CallError e;
  std::snprintf(e.msg, sizeof e.msg, fmt, a, b);
  throw e;
}

// ---- The CPU JIT's split modules (cpu/dispatch.h)
// A kernels module's exported kernels, by name; the loader hands the table to the op's host
// module as opf_module_info::impl of the module it joins from the two.
struct KernelTable {
  static constexpr int kMax = 32;
  struct Entry {
    const char* name;
    void* fn;
  };
  const char* isa = "";
  int count = 0;
  Entry entries[kMax] = {};
};

// The kernels of the call now running on this thread, in a host module: set around run() and
// supports() from self->impl; the op's OPF_DISPATCH runs on the calling thread.
inline thread_local const KernelTable* bound_kernels = nullptr;
struct BindKernels {
  const KernelTable* saved;
  explicit BindKernels(const opf_module_info* self) : saved(bound_kernels) {
    bound_kernels = self ? static_cast<const KernelTable*>(self->impl) : nullptr;
  }
  ~BindKernels() { bound_kernels = saved; }
  BindKernels(const BindKernels&) = delete;
  BindKernels& operator=(const BindKernels&) = delete;
};

template <class Fn>
Fn bound_kernel(const char* name) {
  const KernelTable* t = bound_kernels;
  if (!t) fail("%s: this CPU JIT host module was called without a kernels module", name);
  for (int i = 0; i < t->count; ++i)
    if (std::strcmp(t->entries[i].name, name) == 0) return reinterpret_cast<Fn>(t->entries[i].fn);
  fail("the CPU JIT kernels module joined to this call exports no kernel %s", name);
}

// Runs body(call, execute) and turns exceptions into the ABI's (status, message).
template <class F>
int guarded(const opf_call* call, bool execute, char* err, size_t len, F&& body) {
  try {
    if (!call) fail("no call");
    body(call, execute);
    return 0;
  } catch (const CallError& e) {
    std::snprintf(err, len, "%s", e.msg);
  } catch (const std::exception& e) {
    std::snprintf(err, len, "%s", e.what());
  } catch (...) {
    std::snprintf(err, len, "unknown error");
  }
  return 1;
}

}  // namespace opf::module

// A JIT host module (cpu/dispatch.h) binds the kernels the loader joined to it for each call; its
// isa is its kernels module's (the loader's joined table says it).
#ifdef OPF_JIT_HOST
#define OPF_MODULE_BIND_KERNELS_(SELF) const opf::module::BindKernels opf_bound_kernels_(SELF)
#define OPF_MODULE_ISA_(ISA) "(JIT host code)"
#else
#define OPF_MODULE_BIND_KERNELS_(SELF) (void)(SELF)
#define OPF_MODULE_ISA_(ISA) ISA
#endif

// Defines the one exported symbol of a CPU module. ISA is a const char* expression; BODY is
// void(const opf_call* call, bool execute): it checks the call (failing with one line) and, when
// execute is true, computes it. supports() runs the same checks without computing.
#define OPF_DEFINE_MODULE(OP, BACKEND, ISA, BODY)                                                          \
  extern "C" OPF_EXPORT const opf_module_info* opf_module(void) {                                          \
    static const opf_module_info info{OPF_ABI_VERSION,                                                     \
                                      OP,                                                                  \
                                      BACKEND,                                                             \
                                      OPF_MODULE_ISA_(ISA),                                                \
                                      [](const opf_module_info* s, const opf_call* c, char* e, size_t n) { \
                                        OPF_MODULE_BIND_KERNELS_(s);                                       \
                                        return opf::module::guarded(c, true, e, n, BODY);                  \
                                      },                                                                   \
                                      [](const opf_module_info* s, const opf_call* c, char* e, size_t n) { \
                                        OPF_MODULE_BIND_KERNELS_(s);                                       \
                                        return opf::module::guarded(c, false, e, n, BODY);                 \
                                      },                                                                   \
                                      nullptr};                                                            \
    return &info;                                                                                          \
  }
