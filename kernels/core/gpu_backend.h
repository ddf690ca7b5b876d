// Internal: the Backend and Device of a GPU driver API, written once for CUDA and HIP (and the
// host emulation the tests run). Everything API-specific stays in the adapter; this file holds
// the policy: a device is required before any memory or module call, the device context is bound
// on the calling thread first, and every failure becomes one opf::Error line naming the backend.
//
// Api is gpu_module.h's adapter plus:
//   static constexpr const char* name;              "cuda"
//   static constexpr const char* prebuilt_suffix;   file Meson builds per op: "_cuda.fatbin"
//   static constexpr const char* artefact;          file the JIT publishes: "module.cubin"
//   Availability availability() const;             cached probe, no side effects
//   std::string arch() const; std::string device_name() const;   of device 0
//   int load(Module*, const std::string& path);     code object from a file (throws if unreadable)
//   int to_device(void* dst, const void* src, size_t); int to_host(void* dst, const void* src, size_t);
//   int copy(void* dst, const void* src, size_t);   device to device, on the default stream
//   Event; int event_create(Event*), event_destroy(Event), event_record(Event) (default stream),
//   event_wait(Event), event_ms(Event from, Event to, float* ms)     timing (GpuDevice::time)
//   size_t l2_bytes() const;                        of device 0 (0: unknown)
//   std::vector<std::string> jit_identity(const JitSource&) const;   compiler, arch and options
//   void jit_compile(const std::string& op, const JitSource&, const std::string& out_path,
//                    const std::string& log_path) const;             throws, naming log_path
#pragma once

#include <dlfcn.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/shared_library.h"
#include "core/backend.h"
#include "core/gpu_module.h"
#include "opforge/build_info.h"
#include "opforge/error.h"

namespace opf::detail {

// Opens a host launcher shared object and checks its table; throws one line naming the path.
inline const opf_gpu_launcher* open_launcher(const OpInfo& op, const std::string& path) {
  SharedLibrary lib =
      SharedLibrary::open(path, RTLD_NOW | RTLD_LOCAL, "cannot load GPU launcher " + path + " of op '" + op.name + "'");
  auto fn = lib.symbol<opf_gpu_launcher_table_fn>("opf_gpu_launcher_table");
  const opf_gpu_launcher* l = fn ? fn() : nullptr;
  std::string why;
  if (!fn) why = "it does not export opf_gpu_launcher_table";
  else if (!l || !l->run) why = "its table has no run function";
  else if (l->abi_version != OPF_ABI_VERSION)
    why = "ABI version " + std::to_string(l->abi_version) + ", expected " + std::to_string(OPF_ABI_VERSION);
  else if (!l->op || op.name != l->op) why = std::string("it is for op '") + (l->op ? l->op : "(null)") + "'";
  if (!why.empty()) throw Error("GPU launcher " + path + " rejected: " + why);
  lib.release();  // never dlclose()d: modules use it for the process's life
  return l;
}

template <class Api>
void gpu_check(const Api& api, int rc, const char* what) {
  if (rc != 0) throw Error(std::string(Api::name) + ": " + what + " failed: " + api.error(rc));
}

// Throws unless a device exists, then binds its context to this thread.
template <class Api>
void gpu_ready(Api& api) {
  if (Availability a = api.availability(); !a.ok) throw Error(std::string(Api::name) + ": " + a.reason);
  gpu_check(api, api.make_current(), "binding the device context");
}

template <class Api>
class GpuDevice final : public Device {
 public:
  explicit GpuDevice(Api& api) : api_(api) {}

  void* alloc(size_t bytes) override {
    gpu_ready(api_);
    void* p = nullptr;
    gpu_check(api_, api_.alloc(&p, bytes ? bytes : 1), "device allocation");
    return p;
  }
  void free(void* p) override {
    if (!p) return;
    gpu_ready(api_);
    gpu_check(api_, api_.release(p), "device free");
  }
  void to_device(void* dst, const void* src, size_t bytes) override {
    gpu_ready(api_);
    gpu_check(api_, api_.to_device(dst, src, bytes), "host-to-device copy");
  }
  void to_host(void* dst, const void* src, size_t bytes) override {
    gpu_ready(api_);
    gpu_check(api_, api_.to_host(dst, src, bytes), "device-to-host copy");
  }
  void synchronize() override {
    gpu_ready(api_);
    gpu_check(api_, api_.synchronize(), "synchronize");
  }
  std::string describe() const override { return api_.device_name() + " (" + api_.arch() + ")"; }
  void copy(void* dst, const void* src, size_t bytes) override {
    gpu_ready(api_);
    gpu_check(api_, api_.copy(dst, src, bytes), "device-to-device copy");
    gpu_check(api_, api_.synchronize(), "synchronize");
  }
  double time(const std::function<void()>& enqueue) override {
    gpu_ready(api_);
    struct Events {  // destroyed whatever enqueue() throws
      Api& api;
      typename Api::Event e[2] = {};
      ~Events() {
        for (auto x : e)
          if (x) (void)api.event_destroy(x);  // nothing to do about a failure here
      }
    } ev{api_};
    for (auto& x : ev.e) gpu_check(api_, api_.event_create(&x), "event creation");
    gpu_check(api_, api_.event_record(ev.e[0]), "event record");
    enqueue();
    gpu_check(api_, api_.event_record(ev.e[1]), "event record");
    gpu_check(api_, api_.event_wait(ev.e[1]), "event wait");
    float ms = 0;
    gpu_check(api_, api_.event_ms(ev.e[0], ev.e[1], &ms), "event timing");
    return double(ms) / 1e3;
  }
  size_t cache_bytes() const override { return api_.l2_bytes(); }

 private:
  Api& api_;
};

template <class Api>
class GpuBackend final : public Backend {
 public:
  std::string name() const override { return Api::name; }
  Availability availability() const override { return api_.availability(); }

  std::string prebuilt_path(const OpInfo& op) const override {
    return build::module_dir() + "/" + op.name + Api::prebuilt_suffix;
  }
  std::vector<std::string> jit_identity(const OpInfo&, const JitSource& src) const override {
    return api_.jit_identity(src);
  }
  std::string artefact_name() const override { return Api::artefact; }
  void compile(const OpInfo& op, const JitSource& src, const std::string& out_path,
               const std::string& log_path) const override {
    api_.jit_compile(op.name, src, out_path, log_path);
  }

  const opf_module_info* open(const OpInfo& op, const std::string& path) override {
    std::lock_guard lock(mu_);
    gpu_ready(api_);
    const opf_gpu_launcher* launcher = op.gpu_launcher ? open_launcher(op, launcher_path(op)) : nullptr;
    typename Api::Module mod{};
    if (int rc = api_.load(&mod, path); rc != 0)
      throw Error(std::string("cannot load ") + Api::name + " module " + path + ": " + api_.error(rc));
    modules_.push_back(std::make_unique<GpuModule<Api>>(api_, mod, op, Api::name, api_.arch(), path, launcher));
    return modules_.back()->info();
  }

  // The op's host launcher (gpu/launcher.h), which Meson builds in every mode.
  static std::string launcher_path(const OpInfo& op) {
    return build::module_dir() + "/opf_" + op.name + "_" + Api::name + "_launch.so";
  }

  Device& device() override {
    if (Availability a = api_.availability(); !a.ok) throw Error(std::string(Api::name) + ": " + a.reason);
    return device_;
  }

 private:
  std::mutex mu_;
  Api api_;
  std::vector<std::unique_ptr<GpuModule<Api>>> modules_;  // live as long as the backend
  GpuDevice<Api> device_{api_};
};

}  // namespace opf::detail
