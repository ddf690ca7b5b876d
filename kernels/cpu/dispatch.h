// Highway dispatch for CPU op modules, and the CPU JIT's split of a module into host code and
// kernels.
//
// Entries `forward` and `backward`: the op writes, per target, ForwardT<S>(const Forward&) and
// BackwardT<S>(const Backward&) templated on the storage type (cpu/storage.h); these macros add
// what Highway needs around them:
//   OPF_CPU_TARGET_ENTRIES()  inside the op's HWY_NAMESPACE: RunForward / RunBackward (switch on
//                             the args' dtype through run_storage: a JIT specialization compiles
//                             one entry for one dtype) and TargetName.
//   OPF_CPU_EXPORT_ENTRIES()  once (#if HWY_ONCE), in the op's namespace: the kernels' exports and
//                             isa(), the target chosen on this CPU (JIT builds: the host target).
// Other ops export each kernel with OPF_KERNEL_EXPORT(Run...), then OPF_CPU_EXPORT_TARGET().
// Call a kernel with OPF_DISPATCH(RunForward)(args).
//
// The split. An op's host code (argument checks, plans, the module table) is the same in every
// JIT module of the op and is as costly to compile as its kernels. So the CPU JIT compiles it once
// per op, in a host module (-DOPF_JIT_HOST), and each (entry, dtype[, variant]) pair's module
// holds only that pair's kernels (-DOPF_JIT_KERNELS="<op>"). The loader joins the two
// (core/loader.cpp): the host module's run() gets the kernels module's table as self->impl and
// OPF_DISPATCH finds the kernel there by name. An op writes its host code under
//   #if HWY_ONCE && OPF_HOST_PART
// and its OPF_KERNEL_EXPORTs before it, under #if HWY_ONCE only. Prebuilt modules and unsplit JIT
// modules (OPFORGE_JIT_SPECIALIZE=0) define neither macro: Highway's own export and dispatch.
//
// Include it with the op's common (once-only) headers; it defines macros and small types (and a
// JIT kernels module's opf_module()), and Highway's own headers must come after foreach_target.h.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cpu/storage.h"
#include "opforge/module.h"

#define OPF_CPU_TARGET_ENTRIES()                                                            \
  void RunForward(const Forward& a) {                                                       \
    opf::cpu::run_storage<"forward">(a.dtype, [&](auto s) { ForwardT<decltype(s)>(a); });   \
  }                                                                                         \
  void RunBackward(const Backward& a) {                                                     \
    opf::cpu::run_storage<"backward">(a.dtype, [&](auto s) { BackwardT<decltype(s)>(a); }); \
  }                                                                                         \
  const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

#define OPF_CPU_EXPORT_ENTRIES()  \
  OPF_KERNEL_EXPORT(RunForward);  \
  OPF_KERNEL_EXPORT(RunBackward); \
  OPF_CPU_EXPORT_TARGET()

// After the op's own OPF_KERNEL_EXPORTs: TargetName's, and isa().
#define OPF_CPU_EXPORT_TARGET()  \
  OPF_KERNEL_EXPORT(TargetName); \
  const char* isa() { return OPF_DISPATCH(TargetName)(); }

#if defined(OPF_JIT_KERNELS) && defined(OPF_JIT_HOST)
#error "a CPU JIT module is a host module or a kernels module, not both"
#endif

#if defined(OPF_JIT_KERNELS)

#define OPF_HOST_PART 0

namespace opf::cpu {
inline opf::module::KernelTable jit_kernels;  // this module's

// Fills the module's kernel table at load (static initialisation, before opf_module() is called).
struct KernelExport {
  KernelExport(const char* name, void* fn, const char* isa) {
    auto& t = jit_kernels;
    if (t.count == opf::module::KernelTable::kMax) {  // at dlopen(): no caller to fail to
      std::fprintf(stderr, "opforge: %s: more than %d kernels in one module (raise KernelTable::kMax)\n", name,
                   opf::module::KernelTable::kMax);
      std::abort();
    }
    t.entries[t.count++] = {name, fn};
    t.isa = isa;
  }
  // Function pointers as void*: POSIX guarantees the round trip (dlsym relies on it).
  template <class Fn>
  static void* pointer(Fn* fn) {
    return reinterpret_cast<void*>(fn);
  }
};
}  // namespace opf::cpu

#define OPF_KERNEL_EXPORT(F)                                             \
  [[maybe_unused]] const ::opf::cpu::KernelExport opf_kernel_export_##F( \
      #F, ::opf::cpu::KernelExport::pointer(&HWY_STATIC_DISPATCH(F)), hwy::TargetName(HWY_STATIC_TARGET))
#define OPF_DISPATCH(F) HWY_STATIC_DISPATCH(F)

// A kernels module's table: run() refuses (the loader runs the op's host module with it).
extern "C" OPF_EXPORT const opf_module_info* opf_module(void) {
  static const opf_module_info info{OPF_ABI_VERSION,
                                    OPF_JIT_KERNELS,
                                    "cpu",
                                    opf::cpu::jit_kernels.isa,
                                    [](const opf_module_info*, const opf_call*, char* e, size_t n) {
                                      std::snprintf(e, n, "%s",
                                                    "a CPU JIT kernels module runs only through its op's host module");
                                      return 1;
                                    },
                                    nullptr,
                                    &opf::cpu::jit_kernels};
  return &info;
}

#elif defined(OPF_JIT_HOST)

#define OPF_HOST_PART 1
#define OPF_KERNEL_EXPORT(F) static_assert(true)
#define OPF_DISPATCH(F) (::opf::module::bound_kernel<decltype(&HWY_STATIC_DISPATCH(F))>(#F))

#else

#define OPF_HOST_PART 1
#define OPF_KERNEL_EXPORT(F) HWY_EXPORT(F)
#define OPF_DISPATCH(F) HWY_DYNAMIC_DISPATCH(F)

#endif
