// CUDA backend. Modules are code objects: a fatbin built by nvcc (prebuilt) or a cubin built by
// NVRTC (JIT), loaded with cuModuleLoadData and launched through gpu_module.h.
//
// The driver (libcuda.so.1) and NVRTC are dlopen()ed, never linked: opforge must run, list ops and
// JIT-compile CUDA modules on machines without a GPU or driver. Availability never creates a
// context; the primary context is retained only when a module is opened or memory is used.
#include <dlfcn.h>

#include <cuda.h>
#include <nvrtc.h>

#include <algorithm>
#include <mutex>
#include <type_traits>

#include "core/backend.h"
#include "core/cuda_jit.h"
#include "core/gpu_backend.h"
#include "opforge/build_info.h"
#include "opforge/error.h"

#define OPF_STR2(x) #x
#define OPF_STR(x) OPF_STR2(x)  // expands cuda.h's versioned aliases: cuMemAlloc -> "cuMemAlloc_v2"

namespace opf::detail {
namespace {

// ------------------------------------------------------------------ driver API through dlopen
struct Driver {
  void* handle = nullptr;
  std::string load_error;
// NOLINTNEXTLINE(bugprone-macro-parentheses): fn is a name (declared, and ::-qualified), not an expression
#define OPF_CU_FN(fn) decltype(&::fn) fn = nullptr;
  OPF_CU_FN(cuInit)
  OPF_CU_FN(cuDriverGetVersion)
  OPF_CU_FN(cuDeviceGetCount)
  OPF_CU_FN(cuDeviceGet)
  OPF_CU_FN(cuDeviceGetAttribute)
  OPF_CU_FN(cuDeviceGetName)
  OPF_CU_FN(cuDevicePrimaryCtxRetain)
  OPF_CU_FN(cuCtxSetCurrent)
  OPF_CU_FN(cuCtxSynchronize)
  OPF_CU_FN(cuModuleLoadData)
  OPF_CU_FN(cuModuleUnload)
  OPF_CU_FN(cuModuleGetFunction)
  OPF_CU_FN(cuModuleGetGlobal)
  OPF_CU_FN(cuMemAlloc)
  OPF_CU_FN(cuMemFree)
  OPF_CU_FN(cuMemcpyHtoD)
  OPF_CU_FN(cuMemcpyHtoDAsync)
  OPF_CU_FN(cuMemcpyDtoH)
  OPF_CU_FN(cuLaunchKernel)
  OPF_CU_FN(cuGetErrorName)
  OPF_CU_FN(cuMemcpyDtoD)
  OPF_CU_FN(cuEventCreate)
  OPF_CU_FN(cuEventRecord)
  OPF_CU_FN(cuEventSynchronize)
  OPF_CU_FN(cuEventDestroy)
  OPF_CU_FN(cuEventElapsedTime)  // cuEventElapsedTime_v2 (drivers >= 12.8), else the original
#undef OPF_CU_FN

  // Loads the library and resolves every function, or records why not. Loading a library has no
  // effect on the device; cuInit is called by probe(), not here.
  Driver() {
    handle = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      load_error = "no CUDA driver (libcuda.so.1 not loadable)";
      return;
    }
    bool ok = true;
    auto sym = [&](auto& f, const char* name) {
      f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(::dlsym(handle, name));
      if (!f && ok) {
        ok = false;
        load_error = std::string("CUDA driver too old: libcuda.so.1 lacks ") + name;
      }
    };
#define OPF_CU_SYM(fn) sym(fn, OPF_STR(fn))
    OPF_CU_SYM(cuInit);
    OPF_CU_SYM(cuDriverGetVersion);
    OPF_CU_SYM(cuDeviceGetCount);
    OPF_CU_SYM(cuDeviceGet);
    OPF_CU_SYM(cuDeviceGetAttribute);
    OPF_CU_SYM(cuDeviceGetName);
    OPF_CU_SYM(cuDevicePrimaryCtxRetain);
    OPF_CU_SYM(cuCtxSetCurrent);
    OPF_CU_SYM(cuCtxSynchronize);
    OPF_CU_SYM(cuModuleLoadData);
    OPF_CU_SYM(cuModuleUnload);
    OPF_CU_SYM(cuModuleGetFunction);
    OPF_CU_SYM(cuModuleGetGlobal);
    OPF_CU_SYM(cuMemAlloc);
    OPF_CU_SYM(cuMemFree);
    OPF_CU_SYM(cuMemcpyHtoD);
    OPF_CU_SYM(cuMemcpyHtoDAsync);
    OPF_CU_SYM(cuMemcpyDtoH);
    OPF_CU_SYM(cuLaunchKernel);
    OPF_CU_SYM(cuGetErrorName);
    OPF_CU_SYM(cuMemcpyDtoD);
    OPF_CU_SYM(cuEventCreate);
    OPF_CU_SYM(cuEventRecord);
    OPF_CU_SYM(cuEventSynchronize);
    OPF_CU_SYM(cuEventDestroy);
    // _v2 where the driver has it (>= 12.8); the original has the same signature
    cuEventElapsedTime = reinterpret_cast<decltype(cuEventElapsedTime)>(::dlsym(handle, OPF_STR(cuEventElapsedTime)));
    if (!cuEventElapsedTime) sym(cuEventElapsedTime, "cuEventElapsedTime");
#undef OPF_CU_SYM
    if (!ok) handle = nullptr;  // kept loaded (dlclose of a driver is not worth the risk)
  }

  std::string error(int rc) const {
    const char* name = nullptr;
    if (cuGetErrorName && cuGetErrorName(CUresult(rc), &name) == CUDA_SUCCESS && name) return name;
    return "CUDA error " + std::to_string(rc);
  }
};

Driver& driver() {
  static Driver d;  // dlopen once per process
  return d;
}

struct Probe {
  Availability avail;
  CUdevice dev = 0;
  std::string arch;  // "sm_90" of device 0
  std::string name;
};

// cuInit + device query: no context is created.
const Probe& probe() {
  static const Probe p = [] {
    Probe r;
    Driver& d = driver();
    if (!d.handle) {
      r.avail = {false, d.load_error};
      return r;
    }
    if (CUresult rc = d.cuInit(0); rc != CUDA_SUCCESS) {
      r.avail = {false, "CUDA driver present but cuInit failed: " + d.error(rc)};
      return r;
    }
    int count = 0;
    if (CUresult rc = d.cuDeviceGetCount(&count); rc != CUDA_SUCCESS || count == 0) {
      r.avail = {false, rc != CUDA_SUCCESS ? "cuDeviceGetCount failed: " + d.error(rc) : "no CUDA device"};
      return r;
    }
    int major = 0, minor = 0, dv = 0;
    char name[256] = {};
    d.cuDeviceGet(&r.dev, 0);
    d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, r.dev);
    d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, r.dev);
    d.cuDeviceGetName(name, sizeof name, r.dev);
    d.cuDriverGetVersion(&dv);
    r.arch = "sm_" + std::to_string(major) + std::to_string(minor);
    r.name = name;
    r.avail = {true, std::to_string(count) + " device(s); device 0: " + r.name + " (" + r.arch + "), driver " +
                         std::to_string(dv / 1000) + "." + std::to_string(dv % 1000 / 10)};
    return r;
  }();
  return p;
}

// The device's primary context, retained on first real use.
struct Context {
  std::once_flag once;
  CUcontext ctx = nullptr;
  CUresult status = CUDA_SUCCESS;

  CUresult make_current() {
    std::call_once(once, [&] { status = driver().cuDevicePrimaryCtxRetain(&ctx, probe().dev); });
    if (status != CUDA_SUCCESS) return status;
    return driver().cuCtxSetCurrent(ctx);
  }
};

Context& context() {
  static Context c;
  return c;
}

// gpu_module.h / gpu_backend.h's driver adapter.
struct CudaApi {
  using Module = CUmodule;
  using Function = CUfunction;
  static constexpr const char* name = "cuda";
  static constexpr const char* prebuilt_suffix = "_cuda.fatbin";
  static constexpr const char* artefact = "module.cubin";

  std::string error(int rc) const { return driver().error(rc); }
  Availability availability() const { return probe().avail; }
  std::string arch() const { return probe().arch; }
  std::string device_name() const { return probe().name; }
  int make_current() { return context().make_current(); }

  int load(Module* m, const std::string& path) {
    const std::string image = read_binary_file(path);
    return driver().cuModuleLoadData(m, image.data());
  }
  int unload(Module m) { return driver().cuModuleUnload(m); }
  int get_function(Function* f, Module m, const char* fn) { return driver().cuModuleGetFunction(f, m, fn); }
  int read_global(void* dst, size_t bytes, Module m, const char* global) {
    CUdeviceptr p = 0;
    size_t size = 0;
    if (CUresult rc = driver().cuModuleGetGlobal(&p, &size, m, global); rc != CUDA_SUCCESS) return rc;
    if (size != bytes) return -1;
    return driver().cuMemcpyDtoH(dst, p, bytes);
  }
  int launch(Function f, unsigned gx, unsigned gy, unsigned block, unsigned shared, void* stream, opf_gpu_args* a) {
    void* params[] = {a};
    return driver().cuLaunchKernel(f, gx, gy, 1, block, 1, 1, shared, CUstream(stream), params, nullptr);
  }
  int alloc(void** p, size_t bytes) {
    CUdeviceptr d = 0;
    CUresult rc = driver().cuMemAlloc(&d, bytes);
    // NOLINTNEXTLINE(performance-no-int-to-ptr): the driver API's device pointers are integers
    *p = reinterpret_cast<void*>(d);
    return rc;
  }
  int release(void* p) { return driver().cuMemFree(CUdeviceptr(p)); }
  int to_device(void* dst, const void* src, size_t bytes) {
    return driver().cuMemcpyHtoD(CUdeviceptr(dst), src, bytes);
  }
  int to_host(void* dst, const void* src, size_t bytes) { return driver().cuMemcpyDtoH(dst, CUdeviceptr(src), bytes); }
  // From pageable memory the driver stages src before returning, so the caller may reuse it.
  int upload(void* dst, const void* src, size_t bytes, void* stream) {
    return driver().cuMemcpyHtoDAsync(CUdeviceptr(dst), src, bytes, static_cast<CUstream>(stream));
  }
  int synchronize() { return driver().cuCtxSynchronize(); }
  int copy(void* dst, const void* src, size_t bytes) {
    return driver().cuMemcpyDtoD(CUdeviceptr(dst), CUdeviceptr(src), bytes);
  }
  // Events on the default stream (gpu_backend.h's GpuDevice::time).
  using Event = CUevent;
  int event_create(Event* e) { return driver().cuEventCreate(e, CU_EVENT_DEFAULT); }
  int event_destroy(Event e) { return driver().cuEventDestroy(e); }
  int event_record(Event e) { return driver().cuEventRecord(e, nullptr); }
  int event_wait(Event e) { return driver().cuEventSynchronize(e); }
  int event_ms(Event from, Event to, float* ms) { return driver().cuEventElapsedTime(ms, from, to); }
  size_t l2_bytes() const {
    int v = 0;
    return driver().cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, probe().dev) == CUDA_SUCCESS && v > 0
               ? size_t(v)
               : 0;
  }

  std::vector<std::string> jit_identity(const JitSource& src) const {
    const std::string a = cuda_jit_arch();
    std::vector<std::string> id = {"compiler=NVRTC " + nvrtc_version(), "arch=" + a};
    for (auto& o : nvrtc_options(src, a)) id.push_back(o);
    return id;
  }
  void jit_compile(const std::string& op, const JitSource& src, const std::string& out_path,
                   const std::string& log_path) const {
    nvrtc_compile(op, src, cuda_jit_arch(), out_path, log_path);
  }
};

// ------------------------------------------------------------------ NVRTC through dlopen
struct Nvrtc {
  void* handle = nullptr;
  std::string load_error, path;
// NOLINTNEXTLINE(bugprone-macro-parentheses): fn is a name (declared, and ::-qualified), not an expression
#define OPF_NVRTC_FN(fn) decltype(&::fn) fn = nullptr;
  OPF_NVRTC_FN(nvrtcVersion)
  OPF_NVRTC_FN(nvrtcGetErrorString)
  OPF_NVRTC_FN(nvrtcCreateProgram)
  OPF_NVRTC_FN(nvrtcCompileProgram)
  OPF_NVRTC_FN(nvrtcDestroyProgram)
  OPF_NVRTC_FN(nvrtcGetProgramLogSize)
  OPF_NVRTC_FN(nvrtcGetProgramLog)
  OPF_NVRTC_FN(nvrtcGetCUBINSize)
  OPF_NVRTC_FN(nvrtcGetCUBIN)
#undef OPF_NVRTC_FN

  // The toolkit Meson found first (its headers match), then the system's.
  Nvrtc() {
    std::vector<std::string> candidates;
    if (!build::cuda_root().empty()) candidates.push_back(build::cuda_root() + "/lib64/libnvrtc.so");
    candidates.push_back("libnvrtc.so");
    for (const auto& c : candidates)
      if ((handle = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL))) {
        path = c;
        break;
      }
    if (!handle) {
      load_error = "NVRTC not loadable (tried " + candidates.front() + " and libnvrtc.so)";
      return;
    }
    bool ok = true;
    auto sym = [&](auto& f, const char* name) {
      f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(::dlsym(handle, name));
      if (!f && ok) {
        ok = false;
        load_error = path + " lacks " + name;
      }
    };
#define OPF_NVRTC_SYM(fn) sym(fn, #fn)
    OPF_NVRTC_SYM(nvrtcVersion);
    OPF_NVRTC_SYM(nvrtcGetErrorString);
    OPF_NVRTC_SYM(nvrtcCreateProgram);
    OPF_NVRTC_SYM(nvrtcCompileProgram);
    OPF_NVRTC_SYM(nvrtcDestroyProgram);
    OPF_NVRTC_SYM(nvrtcGetProgramLogSize);
    OPF_NVRTC_SYM(nvrtcGetProgramLog);
    OPF_NVRTC_SYM(nvrtcGetCUBINSize);
    OPF_NVRTC_SYM(nvrtcGetCUBIN);
#undef OPF_NVRTC_SYM
    if (!ok) handle = nullptr;
  }
};

Nvrtc& nvrtc() {
  static Nvrtc n;
  return n;
}

}  // namespace

Availability cuda_availability() { return probe().avail; }

std::string cuda_jit_arch() {
  if (probe().avail.ok) return probe().arch;
  const auto& archs = build::cuda_arch();
  std::string a = archs.empty() ? "9.0" : archs.back();
  a.erase(std::remove(a.begin(), a.end(), '.'), a.end());
  return "sm_" + a;
}

std::string nvrtc_version() {
  Nvrtc& n = nvrtc();
  if (!n.handle) return "unavailable";
  int major = 0, minor = 0;
  n.nvrtcVersion(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

std::vector<std::string> nvrtc_options(const JitSource& src, const std::string& arch) {
  // Mirrors kernels/meson.build's nvcc command (-O3 is NVRTC's default; C++17; same -I and -D);
  // NVRTC has no built-in cuda_fp16.h/cuda_bf16.h, hence the toolkit's include dir.
  std::vector<std::string> o = {"--gpu-architecture=" + arch, "-std=c++17"};
  for (const auto& d : src.include_dirs) o.push_back("-I" + d);
  if (!build::cuda_root().empty()) o.push_back("-I" + build::cuda_root() + "/include");
  for (const auto& d : src.defines) o.push_back("-D" + d);
  return o;
}

void nvrtc_compile(const std::string& op, const JitSource& src, const std::string& arch, const std::string& out_path,
                   const std::string& log_path) {
  Nvrtc& n = nvrtc();
  const std::vector<std::string> opts = nvrtc_options(src, arch);
  std::string header = "NVRTC " + nvrtc_version() + " (" + n.path + "):";
  for (const auto& o : opts) header += " " + o;
  header += " " + src.main_file + "\n";
  if (!n.handle) {
    write_binary_file(log_path, header.data(), header.size());
    throw Error("cuda JIT of " + op + " failed: " + n.load_error + "; see log " + log_path);
  }
  const std::string text = read_binary_file(src.main_file);
  nvrtcProgram prog = nullptr;
  if (nvrtcResult rc = n.nvrtcCreateProgram(&prog, text.c_str(), src.main_file.c_str(), 0, nullptr, nullptr);
      rc != NVRTC_SUCCESS) {
    write_binary_file(log_path, header.data(), header.size());
    throw Error("cuda JIT of " + op + " failed: nvrtcCreateProgram: " + n.nvrtcGetErrorString(rc) + "; see log " +
                log_path);
  }
  std::vector<const char*> argv;
  for (const auto& o : opts) argv.push_back(o.c_str());
  const nvrtcResult rc = n.nvrtcCompileProgram(prog, int(argv.size()), argv.data());
  size_t log_size = 0;
  n.nvrtcGetProgramLogSize(prog, &log_size);
  std::string log(log_size, '\0');
  if (log_size) n.nvrtcGetProgramLog(prog, log.data());
  while (!log.empty() && log.back() == '\0') log.pop_back();
  header += log;
  write_binary_file(log_path, header.data(), header.size());
  if (rc != NVRTC_SUCCESS) {
    n.nvrtcDestroyProgram(&prog);
    throw Error("cuda JIT of " + op + " failed: NVRTC " + n.nvrtcGetErrorString(rc) + "; see log " + log_path);
  }
  size_t size = 0;
  n.nvrtcGetCUBINSize(prog, &size);
  std::string cubin(size, '\0');
  n.nvrtcGetCUBIN(prog, cubin.data());
  n.nvrtcDestroyProgram(&prog);
  if (size == 0) throw Error("cuda JIT of " + op + " produced no cubin for " + arch + "; see log " + log_path);
  write_binary_file(out_path, cubin.data(), cubin.size());
}

std::unique_ptr<Backend> make_cuda_backend() { return std::make_unique<GpuBackend<CudaApi>>(); }

}  // namespace opf::detail
