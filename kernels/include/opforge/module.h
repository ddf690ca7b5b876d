// Helpers for writing a CPU op module (cpu.cpp): the exported ABI table and argument checks.
#pragma once

#include <cstdio>
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

inline void expect_args(const opf_call* c, int n) {
  if (c->nargs != n) fail("%sexpected %lld tensor arguments", "", n);
}

// Runs body(call) and turns exceptions into the ABI's (status, message).
template <class F>
int guarded(const opf_call* call, char* err, size_t len, F&& body) {
  try {
    body(call);
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

// Defines the one exported symbol of a CPU module. ISA is a const char* expression;
// RUN is int(const opf_call*, char* err, size_t len).
#define OPF_DEFINE_MODULE(OP, BACKEND, ISA, RUN)                                              \
  extern "C" OPF_EXPORT const opf_module_info* opf_module(void) {                             \
    static const opf_module_info info{                                                        \
        OPF_ABI_VERSION, OP, BACKEND, ISA,                                                    \
        [](const opf_module_info*, const opf_call* c, char* e, size_t n) { return RUN(c, e, n); }, \
        nullptr};                                                                             \
    return &info;                                                                             \
  }
