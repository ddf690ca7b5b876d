// The emulated GPU "driver": an adapter like core/cuda_backend.cpp's over dlopen()ed host builds of
// kernel.cu (gpu_emulation.h), so tests go through the same GpuBackend (module loading),
// GpuDevice (memory) and GpuModule (plans, argument checks, launches) as a real device. Used by
// the launcher tests here and by the emulation sweep (harness/suites/emu_sweep_test.cpp).
// OPFORGE_EMU_DIR names the directory of the emulated modules (emu_<op>_w<warp>.so).
#pragma once

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/gpu_backend.h"
#include "opforge/error.h"
#include "opforge/manifest.h"

namespace opf::emu {

using EmuKernel = void (*)(opf_gpu_args);
using EmuLaunch = int (*)(EmuKernel, const opf_gpu_args*, unsigned, unsigned, unsigned);

struct EmuFunction {
  EmuKernel kernel = nullptr;
  EmuLaunch launcher = nullptr;  // the launcher of the module the kernel came from (warp size)
};

struct EmuApi {
  using Module = void*;
  using Function = EmuFunction;
  static constexpr const char* name = "emu";
  static constexpr const char* prebuilt_suffix = ".so";
  static constexpr const char* artefact = "module.so";
  std::string load_error;

  std::string error(int rc) const {
    switch (rc) {
      case 1: return "symbol not found";
      case 2: return "dynamic shared memory is not emulated";
      case 3: return "barrier reached by only part of a block (see stderr)";
      case 4: return "out of host memory";
      case 5: return load_error;
    }
    return "emulation error " + std::to_string(rc);
  }
  Availability availability() const { return {true, "host emulation"}; }
  std::string arch() const { return "emulated"; }
  std::string device_name() const { return "host emulation"; }
  int make_current() { return 0; }

  int load(Module* m, const std::string& path) {
    *m = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!*m) load_error = ::dlerror();
    return *m ? 0 : 5;
  }
  int unload(Module m) { return ::dlclose(m); }
  int get_function(Function* f, Module m, const char* fn) {
    f->kernel = reinterpret_cast<EmuKernel>(::dlsym(m, fn));
    f->launcher = reinterpret_cast<EmuLaunch>(::dlsym(m, "opf_emu_launch"));
    return f->kernel && f->launcher ? 0 : 1;
  }
  int read_global(void* dst, size_t bytes, Module m, const char* global) {
    void* p = ::dlsym(m, global);
    if (!p) return 1;
    Dl_info info;
    void* extra = nullptr;
    if (!::dladdr1(p, &info, &extra, RTLD_DL_SYMENT) || !extra) return -1;
    if (static_cast<const ElfW(Sym)*>(extra)->st_size != bytes) return -1;
    std::memcpy(dst, p, bytes);
    return 0;
  }
  int launch(Function f, unsigned gx, unsigned gy, unsigned block, unsigned shared, void*, opf_gpu_args* a) {
    if (shared) return 2;
    return f.launcher(f.kernel, a, gx, gy, block) == 0 ? 0 : 3;
  }
  int alloc(void** p, size_t bytes) {
    *p = std::malloc(bytes);
    if (*p) std::memset(*p, 0xff, bytes);  // uninitialised on a device too
    return *p ? 0 : 4;
  }
  int release(void* p) {
    std::free(p);
    return 0;
  }
  int to_device(void* dst, const void* src, size_t bytes) {
    std::memcpy(dst, src, bytes);
    return 0;
  }
  int to_host(void* dst, const void* src, size_t bytes) {
    std::memcpy(dst, src, bytes);
    return 0;
  }
  int upload(void* dst, const void* src, size_t bytes, void*) {
    std::memcpy(dst, src, bytes);
    return 0;
  }
  int synchronize() { return 0; }
  int copy(void* dst, const void* src, size_t bytes) { return to_device(dst, src, bytes); }
  // Events: the launches run on the host, so an event is the moment it was recorded.
  using Event = std::chrono::steady_clock::time_point*;
  int event_create(Event* e) {
    *e = new std::chrono::steady_clock::time_point();
    return 0;
  }
  int event_destroy(Event e) {
    delete e;
    return 0;
  }
  int event_record(Event e) {
    *e = std::chrono::steady_clock::now();
    return 0;
  }
  int event_wait(Event) { return 0; }
  int event_ms(Event from, Event to, float* ms) {
    *ms = std::chrono::duration<float, std::milli>(*to - *from).count();
    return 0;
  }
  size_t l2_bytes() const { return 0; }
  std::vector<std::string> jit_identity(const detail::JitSource&) const { throw Error("emu: no JIT"); }
  void jit_compile(const std::string&, const detail::JitSource&, const std::string&, const std::string&) const {
    throw Error("emu: no JIT");
  }
};

inline detail::GpuBackend<EmuApi>& emu_backend() {
  static detail::GpuBackend<EmuApi> b;
  return b;
}

// One emulated code object per (op, warp size), opened once.
inline const opf_module_info* emu_module(const OpInfo& op, int warp) {
  static std::map<std::string, const opf_module_info*> loaded;
  const char* dir = std::getenv("OPFORGE_EMU_DIR");
  const std::string path = std::string(dir ? dir : ".") + "/emu_" + op.name + "_w" + std::to_string(warp) + ".so";
  auto& slot = loaded[path];
  if (!slot) slot = emu_backend().open(op, path);
  return slot;
}

}  // namespace opf::emu
