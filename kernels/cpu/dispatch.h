// Highway dispatch for CPU op modules whose entries are `forward` and `backward`. The op writes,
// per target, ForwardT<S>(const Forward&) and BackwardT<S>(const Backward&) templated on the
// storage type (cpu/storage.h); these macros add what Highway needs around them:
//   OPF_CPU_TARGET_ENTRIES()  inside the op's HWY_NAMESPACE: RunForward / RunBackward (switch on
//                             the args' dtype through run_storage: a JIT specialization compiles
//                             one entry for one dtype) and TargetName.
//   OPF_CPU_EXPORT_ENTRIES()  once (#if HWY_ONCE), in the op's namespace: the dispatch tables and
//                             isa(), the target chosen on this CPU (JIT builds: the host target).
// Call an entry with HWY_DYNAMIC_DISPATCH(RunForward)(args).
// Include it with the op's common (once-only) headers; it defines macros only, and Highway's own
// headers must come after foreach_target.h.
#pragma once

#include "cpu/storage.h"

#define OPF_CPU_TARGET_ENTRIES()                                                            \
  void RunForward(const Forward& a) {                                                       \
    opf::cpu::run_storage<"forward">(a.dtype, [&](auto s) { ForwardT<decltype(s)>(a); });   \
  }                                                                                         \
  void RunBackward(const Backward& a) {                                                     \
    opf::cpu::run_storage<"backward">(a.dtype, [&](auto s) { BackwardT<decltype(s)>(a); }); \
  }                                                                                         \
  const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

#define OPF_CPU_EXPORT_ENTRIES() \
  HWY_EXPORT(RunForward);        \
  HWY_EXPORT(RunBackward);       \
  HWY_EXPORT(TargetName);        \
  const char* isa() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }
