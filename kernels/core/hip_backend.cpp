// HIP backend. Modules are code objects: an offload bundle built by hipcc --genco (prebuilt) or a
// code object built by hiprtc (JIT), loaded with hipModuleLoadData and launched through
// gpu_module.h — the same kernel.cu and plans as the CUDA backend.
//
// libamdhip64 (which also holds hiprtc in HIP 5.2) is dlopen()ed, never linked, so opforge runs
// where ROCm is absent. Availability is hipGetDeviceCount (hipErrorNoDevice without a GPU).
#include <dlfcn.h>

#include <hip/hip_runtime_api.h>
#include <hip/hiprtc.h>

#include <algorithm>
#include <mutex>
#include <type_traits>

#include "core/backend.h"
#include "core/gpu_backend.h"
#include "core/hip_jit.h"
#include "opforge/build_info.h"
#include "opforge/error.h"

namespace opf::detail {
namespace {

struct Runtime {
  void* handle = nullptr;
  std::string load_error, path;
// NOLINTNEXTLINE(bugprone-macro-parentheses): fn is a name (declared, and ::-qualified), not an expression
#define OPF_HIP_FN(fn) decltype(&::fn) fn = nullptr;
  OPF_HIP_FN(hipGetDeviceCount)
  OPF_HIP_FN(hipGetDeviceProperties)
  OPF_HIP_FN(hipRuntimeGetVersion)
  OPF_HIP_FN(hipSetDevice)
  OPF_HIP_FN(hipDeviceSynchronize)
  OPF_HIP_FN(hipModuleLoadData)
  OPF_HIP_FN(hipModuleUnload)
  OPF_HIP_FN(hipModuleGetFunction)
  OPF_HIP_FN(hipModuleGetGlobal)
  OPF_HIP_FN(hipModuleLaunchKernel)
  hipError_t (*hipMalloc)(void**, size_t) = nullptr;  // the header also has a template overload
  OPF_HIP_FN(hipFree)
  OPF_HIP_FN(hipMemcpyHtoD)
  OPF_HIP_FN(hipMemcpyHtoDAsync)
  OPF_HIP_FN(hipMemcpyDtoH)
  OPF_HIP_FN(hipGetErrorName)
  OPF_HIP_FN(hipMemcpyDtoD)
  OPF_HIP_FN(hipEventCreate)
  OPF_HIP_FN(hipEventRecord)
  OPF_HIP_FN(hipEventSynchronize)
  OPF_HIP_FN(hipEventElapsedTime)
  OPF_HIP_FN(hipEventDestroy)
  OPF_HIP_FN(hipDeviceGetAttribute)
  OPF_HIP_FN(hiprtcVersion)
  OPF_HIP_FN(hiprtcGetErrorString)
  OPF_HIP_FN(hiprtcCreateProgram)
  OPF_HIP_FN(hiprtcCompileProgram)
  OPF_HIP_FN(hiprtcDestroyProgram)
  OPF_HIP_FN(hiprtcGetProgramLogSize)
  OPF_HIP_FN(hiprtcGetProgramLog)
  OPF_HIP_FN(hiprtcGetCodeSize)
  OPF_HIP_FN(hiprtcGetCode)
#undef OPF_HIP_FN

  Runtime() {
    for (const char* c : {"libamdhip64.so.5", "libamdhip64.so"})
      if ((handle = ::dlopen(c, RTLD_NOW | RTLD_LOCAL))) {
        path = c;
        break;
      }
    if (!handle) {
      load_error = "no HIP runtime (libamdhip64.so not loadable)";
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
#define OPF_HIP_SYM(fn) sym(fn, #fn)
    OPF_HIP_SYM(hipGetDeviceCount);
    OPF_HIP_SYM(hipGetDeviceProperties);
    OPF_HIP_SYM(hipRuntimeGetVersion);
    OPF_HIP_SYM(hipSetDevice);
    OPF_HIP_SYM(hipDeviceSynchronize);
    OPF_HIP_SYM(hipModuleLoadData);
    OPF_HIP_SYM(hipModuleUnload);
    OPF_HIP_SYM(hipModuleGetFunction);
    OPF_HIP_SYM(hipModuleGetGlobal);
    OPF_HIP_SYM(hipModuleLaunchKernel);
    OPF_HIP_SYM(hipMalloc);
    OPF_HIP_SYM(hipFree);
    OPF_HIP_SYM(hipMemcpyHtoD);
    OPF_HIP_SYM(hipMemcpyHtoDAsync);
    OPF_HIP_SYM(hipMemcpyDtoH);
    OPF_HIP_SYM(hipGetErrorName);
    OPF_HIP_SYM(hipMemcpyDtoD);
    OPF_HIP_SYM(hipEventCreate);
    OPF_HIP_SYM(hipEventRecord);
    OPF_HIP_SYM(hipEventSynchronize);
    OPF_HIP_SYM(hipEventElapsedTime);
    OPF_HIP_SYM(hipEventDestroy);
    OPF_HIP_SYM(hipDeviceGetAttribute);
    OPF_HIP_SYM(hiprtcVersion);
    OPF_HIP_SYM(hiprtcGetErrorString);
    OPF_HIP_SYM(hiprtcCreateProgram);
    OPF_HIP_SYM(hiprtcCompileProgram);
    OPF_HIP_SYM(hiprtcDestroyProgram);
    OPF_HIP_SYM(hiprtcGetProgramLogSize);
    OPF_HIP_SYM(hiprtcGetProgramLog);
    OPF_HIP_SYM(hiprtcGetCodeSize);
    OPF_HIP_SYM(hiprtcGetCode);
#undef OPF_HIP_SYM
    if (!ok) handle = nullptr;
  }

  std::string error(int rc) const {
    if (hipGetErrorName) return hipGetErrorName(hipError_t(rc));
    return "HIP error " + std::to_string(rc);
  }
};

Runtime& runtime() {
  static Runtime r;
  return r;
}

struct Probe {
  Availability avail;
  std::string arch;  // "gfx90a" (target features such as ":sramecc+:xnack-" stripped)
  std::string name;
};

const Probe& probe() {
  static const Probe p = [] {
    Probe r;
    Runtime& rt = runtime();
    if (!rt.handle) {
      r.avail = {false, rt.load_error};
      return r;
    }
    int count = 0;
    if (hipError_t rc = rt.hipGetDeviceCount(&count); rc != hipSuccess || count == 0) {
      r.avail = {false,
                 "no HIP device (hipGetDeviceCount: " + rt.error(rc == hipSuccess ? hipErrorNoDevice : rc) + ")"};
      return r;
    }
    hipDeviceProp_t props{};
    if (hipError_t rc = rt.hipGetDeviceProperties(&props, 0); rc != hipSuccess) {
      r.avail = {false, "hipGetDeviceProperties failed: " + rt.error(rc)};
      return r;
    }
    r.arch = props.gcnArchName;
    r.arch = r.arch.substr(0, r.arch.find(':'));
    r.name = props.name;
    r.avail = {true, std::to_string(count) + " device(s); device 0: " + r.name + " (" + r.arch + ")"};
    return r;
  }();
  return p;
}

// gpu_module.h / gpu_backend.h's runtime adapter.
struct HipApi {
  using Module = hipModule_t;
  using Function = hipFunction_t;
  static constexpr const char* name = "hip";
  static constexpr const char* prebuilt_suffix = "_hip.hsaco";
  static constexpr const char* artefact = "module.hsaco";

  std::string error(int rc) const { return runtime().error(rc); }
  Availability availability() const { return probe().avail; }
  std::string arch() const { return probe().arch; }
  std::string device_name() const { return probe().name; }
  int make_current() { return runtime().hipSetDevice(0); }

  int load(Module* m, const std::string& path) {
    const std::string image = read_binary_file(path);
    return runtime().hipModuleLoadData(m, image.data());
  }
  int unload(Module m) { return runtime().hipModuleUnload(m); }
  int get_function(Function* f, Module m, const char* fn) { return runtime().hipModuleGetFunction(f, m, fn); }
  int read_global(void* dst, size_t bytes, Module m, const char* global) {
    hipDeviceptr_t p = nullptr;
    size_t size = 0;
    if (hipError_t rc = runtime().hipModuleGetGlobal(&p, &size, m, global); rc != hipSuccess) return rc;
    if (size != bytes) return -1;
    return runtime().hipMemcpyDtoH(dst, p, bytes);
  }
  int launch(Function f, unsigned gx, unsigned gy, unsigned block, unsigned shared, void* stream, opf_gpu_args* a) {
    // The packed-buffer form: the kernel's one by-value struct is the whole kernarg segment.
    size_t size = sizeof *a;
    void* extra[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, a, HIP_LAUNCH_PARAM_BUFFER_SIZE, &size, HIP_LAUNCH_PARAM_END};
    return runtime().hipModuleLaunchKernel(f, gx, gy, 1, block, 1, 1, shared, hipStream_t(stream), nullptr, extra);
  }
  int alloc(void** p, size_t bytes) { return runtime().hipMalloc(p, bytes); }
  int release(void* p) { return runtime().hipFree(p); }
  int to_device(void* dst, const void* src, size_t bytes) {
    return runtime().hipMemcpyHtoD(dst, const_cast<void*>(src), bytes);
  }
  int to_host(void* dst, const void* src, size_t bytes) {
    return runtime().hipMemcpyDtoH(dst, const_cast<void*>(src), bytes);
  }
  // From pageable memory the runtime stages src before returning, so the caller may reuse it.
  int upload(void* dst, const void* src, size_t bytes, void* stream) {
    return runtime().hipMemcpyHtoDAsync(dst, const_cast<void*>(src), bytes, static_cast<hipStream_t>(stream));
  }
  int synchronize() { return runtime().hipDeviceSynchronize(); }
  int copy(void* dst, const void* src, size_t bytes) {
    return runtime().hipMemcpyDtoD(dst, const_cast<void*>(src), bytes);
  }
  // Events on the default stream (gpu_backend.h's GpuDevice::time).
  using Event = hipEvent_t;
  int event_create(Event* e) { return runtime().hipEventCreate(e); }
  int event_destroy(Event e) { return runtime().hipEventDestroy(e); }
  int event_record(Event e) { return runtime().hipEventRecord(e, nullptr); }
  int event_wait(Event e) { return runtime().hipEventSynchronize(e); }
  int event_ms(Event from, Event to, float* ms) { return runtime().hipEventElapsedTime(ms, from, to); }
  size_t l2_bytes() const {
    int v = 0;
    return runtime().hipDeviceGetAttribute(&v, hipDeviceAttributeL2CacheSize, 0) == hipSuccess && v > 0 ? size_t(v) : 0;
  }

  std::vector<std::string> jit_identity(const JitSource& src) const {
    const std::string a = hip_jit_arch();
    std::vector<std::string> id = {"compiler=hiprtc " + hiprtc_version(), "arch=" + a};
    for (auto& o : hiprtc_options(src, a)) id.push_back(o);
    return id;
  }
  void jit_compile(const std::string& op, const JitSource& src, const std::string& out_path,
                   const std::string& log_path) const {
    hiprtc_compile(op, src, hip_jit_arch(), out_path, log_path);
  }
};

}  // namespace

Availability hip_availability() { return probe().avail; }

std::string hip_jit_arch() {
  if (probe().avail.ok) return probe().arch;
  const auto& archs = build::hip_arch();
  return archs.empty() ? "gfx90a" : archs.back();
}

// Measured with Debian's hiprtc 5.2 on layer_norm: these compile; gfx940, gfx942 and gfx1100 abort
// the whole process inside hiprtcCompileProgram (hipcc handles gfx940). Checked before every compile.
const std::vector<std::string>& hiprtc_known_archs() {
  static const std::vector<std::string> v = {"gfx900", "gfx906", "gfx908", "gfx90a", "gfx1030"};
  return v;
}

std::string hiprtc_version() {
  Runtime& rt = runtime();
  if (!rt.handle) return "unavailable";
  int major = 0, minor = 0, rv = 0;
  (void)rt.hiprtcVersion(&major, &minor);
  (void)rt.hipRuntimeGetVersion(&rv);
  return std::to_string(major) + "." + std::to_string(minor) + " (HIP runtime " + std::to_string(rv) + ")";
}

std::vector<std::string> hiprtc_options(const JitSource& src, const std::string& arch) {
  // Mirrors kernels/meson.build's hipcc command: -O3, C++17 (hiprtc defaults to C++14), same -I/-D.
  std::vector<std::string> o = {"--offload-arch=" + arch, "-O3", "-std=c++17"};
  for (const auto& d : src.include_dirs) o.push_back("-I" + d);
  for (const auto& d : src.defines) o.push_back("-D" + d);
  return o;
}

void hiprtc_compile(const std::string& op, const JitSource& src, const std::string& arch, const std::string& out_path,
                    const std::string& log_path) {
  Runtime& rt = runtime();
  const std::vector<std::string> opts = hiprtc_options(src, arch);
  std::string header = "hiprtc " + hiprtc_version() + " (" + rt.path + "):";
  for (const auto& o : opts) header += " " + o;
  header += " " + src.main_file + "\n";
  auto fail = [&](const std::string& why) {
    write_binary_file(log_path, header.data(), header.size());
    throw Error("hip JIT of " + op + " failed: " + why + "; see log " + log_path);
  };
  if (!rt.handle) fail(rt.load_error);
  const auto& known = hiprtc_known_archs();
  if (std::find(known.begin(), known.end(), arch) == known.end()) {
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    header += "refused: hiprtc aborts the process for archs it does not know\n";
    fail("arch '" + arch + "' is not one hiprtc handles (" + list + ")");
  }
  const std::string text = read_binary_file(src.main_file);
  hiprtcProgram prog = nullptr;
  if (hiprtcResult rc = rt.hiprtcCreateProgram(&prog, text.c_str(), src.main_file.c_str(), 0, nullptr, nullptr);
      rc != HIPRTC_SUCCESS)
    fail(std::string("hiprtcCreateProgram: ") + rt.hiprtcGetErrorString(rc));
  std::vector<const char*> argv;
  for (const auto& o : opts) argv.push_back(o.c_str());
  const hiprtcResult rc = rt.hiprtcCompileProgram(prog, int(argv.size()), argv.data());
  size_t log_size = 0;
  rt.hiprtcGetProgramLogSize(prog, &log_size);
  std::string log(log_size, '\0');
  if (log_size) rt.hiprtcGetProgramLog(prog, log.data());
  while (!log.empty() && log.back() == '\0') log.pop_back();
  header += log;
  if (rc != HIPRTC_SUCCESS) {
    rt.hiprtcDestroyProgram(&prog);
    fail(std::string("hiprtc ") + rt.hiprtcGetErrorString(rc));
  }
  size_t size = 0;
  rt.hiprtcGetCodeSize(prog, &size);
  std::string code(size, '\0');
  if (size) rt.hiprtcGetCode(prog, code.data());
  rt.hiprtcDestroyProgram(&prog);
  write_binary_file(log_path, header.data(), header.size());
  if (size == 0) throw Error("hip JIT of " + op + " produced no code object for " + arch + "; see log " + log_path);
  write_binary_file(out_path, code.data(), code.size());
}

std::unique_ptr<Backend> make_hip_backend() { return std::make_unique<GpuBackend<HipApi>>(); }

}  // namespace opf::detail
