// Helpers for writing a CPU op module (cpu.cpp): the exported ABI table and error handling.
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

// Defines the one exported symbol of a CPU module. ISA is a const char* expression; BODY is
// void(const opf_call* call, bool execute): it checks the call (failing with one line) and, when
// execute is true, computes it. supports() runs the same checks without computing.
#define OPF_DEFINE_MODULE(OP, BACKEND, ISA, BODY)                                                        \
  extern "C" OPF_EXPORT const opf_module_info* opf_module(void) {                                        \
    static const opf_module_info info{OPF_ABI_VERSION,                                                   \
                                      OP,                                                                \
                                      BACKEND,                                                           \
                                      ISA,                                                               \
                                      [](const opf_module_info*, const opf_call* c, char* e, size_t n) { \
                                        return opf::module::guarded(c, true, e, n, BODY);                \
                                      },                                                                 \
                                      [](const opf_module_info*, const opf_call* c, char* e, size_t n) { \
                                        return opf::module::guarded(c, false, e, n, BODY);               \
                                      },                                                                 \
                                      nullptr};                                                          \
    return &info;                                                                                        \
  }
