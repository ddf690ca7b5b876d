// GPU backends without a GPU: device detection reports its reason; for every op with a GPU
// backend, NVRTC and hiprtc compile its kernel.cu into code objects that target the requested
// arch and carry every plan and kernel the launcher looks up, and the prebuilt artefacts likewise
// (GpuOp.*, one instance per op). The backends' own mechanics (tuning defines, compile errors, the
// loader's JIT path, arch validation) are shown on layer_norm. Anything that needs a device skips.
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "build_config.h"
#include "core/backend.h"
#include "gpu_image.h"
#include "opforge/build_info.h"
#include "opforge/error.h"
#include "opforge/loader.h"
#include "opforge/manifest.h"
#if OPF_HAVE_CUDA
#include "core/cuda_jit.h"
#endif
#if OPF_HAVE_HIP
#include "core/hip_jit.h"
#endif

namespace opf {
namespace {

namespace fs = std::filesystem;

// A private directory, removed with its contents.
struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/opforge-gpu-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// The op the backends' mechanics are shown on (NEED_LAYER_NORM skips those tests without it).
const OpInfo& layer_norm() {
  const OpInfo* op = find_op("layer_norm");
  if (!op) throw Error("layer_norm is not enabled in this build");
  return *op;
}
#define NEED_LAYER_NORM()     \
  if (!find_op("layer_norm")) \
  GTEST_SKIP() << "layer_norm, the op these backend mechanics are shown on, is not in this build"

// What the loader compiles for an op (core/loader.cpp jit_source): the op's kernel.cu, the public
// and kernels/ include dirs, the manifest's tuning values.
detail::JitSource kernel_source(const OpInfo& op) {
  const std::string kernels = build::source_root() + "/kernels";
  detail::JitSource src;
  src.main_file = kernels + "/ops/" + op.name + "/kernel.cu";
  src.include_dirs = {kernels + "/include", kernels};
  for (const auto& [name, value] : op.tune) {
    std::string upper = name;
    for (auto& c : upper) c = char(std::toupper((unsigned char)c));
    src.defines.push_back("OPF_TUNE_" + upper + "=" + std::to_string((long long)value));
  }
  return src;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : "; ") + x;
  return s;
}

void expect_launchable(const std::string& image_bytes, const std::string& want_arch, const std::string& what,
                       const OpInfo& op) {
  test::ElfImage img;
  ASSERT_NO_THROW(img = test::parse_elf(image_bytes)) << what;
  EXPECT_EQ(img.arch, want_arch) << what;
  const auto problems = test::launch_problems(img, op);
  EXPECT_TRUE(problems.empty()) << what << ": " << join(problems);
}

// Every op of this build with a GPU backend, by name (the GpuOp instances).
std::vector<std::string> gpu_ops(const char* backend) {
  std::vector<std::string> names;
  for (const OpInfo& op : op_table())
    if (op.has_backend(backend)) names.push_back(op.name);
  return names;
}

std::string sm(std::string arch) {
  arch.erase(std::remove(arch.begin(), arch.end(), '.'), arch.end());
  return "sm_" + arch;
}

// ---------------------------------------------------------------------------------- CUDA
#if OPF_HAVE_CUDA

TEST(CudaBackend, AvailabilityNamesTheReason) {
  const Availability a = Loader::instance().availability("cuda");
  // Independent check of the first condition the backend tests.
  void* h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!h) h = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!h) {
    EXPECT_FALSE(a.ok);
    EXPECT_EQ(a.reason, "no CUDA driver (libcuda.so.1 not loadable)");
  } else {
    EXPECT_FALSE(a.reason.empty());
    std::printf("cuda availability: %s (%s)\n", a.ok ? "ok" : "unavailable", a.reason.c_str());
  }
}

TEST(CudaBackend, DeviceAndOpenThrowTheReasonWhenUnavailable) {
  NEED_LAYER_NORM();
  const Availability a = Loader::instance().availability("cuda");
  if (a.ok) GTEST_SKIP() << "a CUDA device is present: " << a.reason;
  try {
    Loader::instance().device("cuda");
    FAIL() << "device(\"cuda\") returned without a device";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(a.reason), std::string::npos) << e.what();
  }
  auto be = detail::make_cuda_backend();
  EXPECT_THROW(be->open(layer_norm(), "/nonexistent.cubin"), Error);
}

TEST(CudaJit, NvrtcCompilesCubinForTheJitArch) {
  NEED_LAYER_NORM();
  auto be = detail::make_cuda_backend();
  TempDir tmp;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_NO_THROW(be->compile(layer_norm(), kernel_source(layer_norm()), tmp / "module.cubin", tmp / "compile.log"));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("NVRTC %s: layer_norm -> %s cubin in %.3f s (includes loading libnvrtc)\n",
              detail::nvrtc_version().c_str(), detail::cuda_jit_arch().c_str(), s);
  expect_launchable(test::read_file(tmp / "module.cubin"), detail::cuda_jit_arch(), "NVRTC cubin", layer_norm());
  // The log names the command, so a failure can be reproduced.
  EXPECT_NE(test::read_file(tmp / "compile.log").find("--gpu-architecture=" + detail::cuda_jit_arch()),
            std::string::npos);
}

TEST(CudaJit, TuningDefinesReachTheKernelText) {
  NEED_LAYER_NORM();
  // A column tile the kernel rejects at compile time (#error): proves -D overrides reach the text.
  auto src = kernel_source(layer_norm());
  src.defines.push_back("OPF_TUNE_COL_TILE=48");
  TempDir tmp;
  try {
    detail::nvrtc_compile("layer_norm", src, "sm_90", tmp / "m.cubin", tmp / "log");
    FAIL() << "compile succeeded with OPF_TUNE_BLOCK=256 not a multiple of OPF_TUNE_COL_TILE=48";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("see log " + (tmp / "log")), std::string::npos) << msg;
    EXPECT_NE(test::read_file(tmp / "log").find("multiple of OPF_TUNE_COL_TILE"), std::string::npos);
  }
  EXPECT_FALSE(fs::exists(tmp / "m.cubin"));
}

TEST(CudaJit, CompileErrorNamesTheLog) {
  TempDir tmp;
  { std::ofstream(tmp / "bad.cu") << "extern \"C\" __global__ void k(int* p) { p[0] = undeclared; }\n"; }
  detail::JitSource src;
  src.main_file = tmp / "bad.cu";
  try {
    detail::nvrtc_compile("bad", src, "sm_90", tmp / "m.cubin", tmp / "compile.log");
    FAIL() << "NVRTC accepted an undeclared identifier";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(tmp / "compile.log"), std::string::npos) << e.what();
    EXPECT_NE(test::read_file(tmp / "compile.log").find("undeclared"), std::string::npos);
  }
}

// The loader's JIT path: with a device, NVRTC compiles once and the second load is a cache hit;
// without one, the loader refuses with the backend's reason before compiling anything.
TEST(CudaJit, LoaderCompilesOnceOrRefusesWithTheReason) {
  NEED_LAYER_NORM();
  TempDir cache;
  ::setenv("OPFORGE_CACHE_DIR", cache.path.c_str(), 1);
  ::setenv("OPFORGE_FORCE_JIT", "1", 1);
  Loader& l = Loader::instance();
  l.forget();
  const Availability a = l.availability("cuda");
  const int compiles0 = l.stats().compiles;
  for (int round = 0; round < 2; ++round) {
    try {
      const LoadedModule& m = l.load(layer_norm(), "cuda");
      EXPECT_TRUE(a.ok) << "loaded a CUDA module without a device";
      EXPECT_EQ(m.source, round == 0 ? ModuleSource::jit_compiled : ModuleSource::jit_cache);
    } catch (const Error& e) {
      EXPECT_FALSE(a.ok) << e.what();
      EXPECT_NE(std::string(e.what()).find(a.reason), std::string::npos) << e.what();
    }
    l.forget();
  }
  EXPECT_EQ(l.stats().compiles - compiles0, a.ok ? 1 : 0);
  ::unsetenv("OPFORGE_FORCE_JIT");
  ::unsetenv("OPFORGE_CACHE_DIR");
}

class CudaOp : public ::testing::TestWithParam<std::string> {
 protected:
  const OpInfo& op() const { return *find_op(GetParam()); }
};

// NVRTC compiles the op's kernel.cu for every configured arch, each cubin with every plan and kernel.
TEST_P(CudaOp, NvrtcTargetsEveryConfiguredArch) {
  for (const std::string& a : build::cuda_arch()) {
    TempDir tmp;
    ASSERT_NO_THROW(detail::nvrtc_compile(op().name, kernel_source(op()), sm(a), tmp / "m.cubin", tmp / "log"))
        << test::read_file(tmp / "log");
    expect_launchable(test::read_file(tmp / "m.cubin"), sm(a), "NVRTC cubin " + sm(a), op());
  }
}

// nvcc's fatbin: SASS for every configured arch, each with every plan and kernel, plus PTX of the newest.
TEST_P(CudaOp, FatbinHasEveryArchAndKernel) {
  if (!op().is_prebuilt("cuda"))
    GTEST_SKIP() << "mode=" << build::mode() << ": " << op().name << "/cuda is not prebuilt";
  auto be = detail::make_cuda_backend();
  const std::string path = be->prebuilt_path(op());
  const auto entries = test::fatbin_entries(test::read_file(path));
  std::vector<std::string> seen;
  for (const auto& e : entries) seen.push_back(e.what);
  for (const std::string& a : build::cuda_arch()) {
    bool found = false;
    for (const auto& e : entries)
      if (e.what == "elf " + sm(a)) {
        found = true;
        expect_launchable(e.bytes, sm(a), path + " (" + sm(a) + ")", op());
      }
    EXPECT_TRUE(found) << path << " has no SASS for " << sm(a) << "; entries: " << join(seen);
  }
  EXPECT_NE(std::find(seen.begin(), seen.end(), "ptx " + sm(build::cuda_arch().back())), seen.end())
      << path << " lacks PTX for newer GPUs; entries: " << join(seen);
}

// On a device: the loader opens the op's module (plans and every kernel resolved at open time);
// numerical correctness is the correctness suite's job (harness/suites).
TEST_P(CudaOp, ModuleOpensOnADevice) {
  const Availability a = Loader::instance().availability("cuda");
  if (!a.ok) GTEST_SKIP() << "needs a cuda device: " << a.reason;
  const LoadedModule& m = Loader::instance().load(op(), "cuda");
  ASSERT_NE(m.info, nullptr);
  EXPECT_STREQ(m.info->backend, "cuda");
}

INSTANTIATE_TEST_SUITE_P(GpuOp, CudaOp, ::testing::ValuesIn(gpu_ops("cuda")),
                         [](const auto& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CudaOp);

#endif  // OPF_HAVE_CUDA

// ---------------------------------------------------------------------------------- HIP
#if OPF_HAVE_HIP

TEST(HipBackend, AvailabilityNamesTheReason) {
  const Availability a = Loader::instance().availability("hip");
  if (!a.ok) {
    EXPECT_FALSE(a.reason.empty());
    // Here (Debian HIP 5.2, no GPU): "no HIP device (hipGetDeviceCount: hipErrorNoDevice)".
    std::printf("hip availability: %s\n", a.reason.c_str());
  }
  if (!a.ok) {
    auto be = detail::make_hip_backend();
    EXPECT_THROW(be->device(), Error);
  }
}

TEST(HipJit, UnknownArchIsRefusedNotCrashed) {
  NEED_LAYER_NORM();
  TempDir tmp;
  try {
    detail::hiprtc_compile("layer_norm", kernel_source(layer_norm()), "gfx942", tmp / "m.hsaco", tmp / "compile.log");
    FAIL() << "hiprtc_compile accepted gfx942";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("gfx942"), std::string::npos) << msg;
    EXPECT_NE(msg.find(tmp / "compile.log"), std::string::npos) << msg;
  }
  EXPECT_FALSE(fs::exists(tmp / "m.hsaco"));
}

class HipOp : public ::testing::TestWithParam<std::string> {
 protected:
  const OpInfo& op() const { return *find_op(GetParam()); }
};

// hiprtc compiles the op's kernel.cu for every configured arch it handles, each code object with
// every plan and kernel.
TEST_P(HipOp, HiprtcTargetsEveryConfiguredArch) {
  const auto& known = detail::hiprtc_known_archs();
  int compiled = 0;
  for (const std::string& arch : build::hip_arch()) {
    if (std::find(known.begin(), known.end(), arch) == known.end()) {
      std::printf("%s: hiprtc 5.2 does not handle %s (hipcc's code object is checked instead)\n", op().name.c_str(),
                  arch.c_str());
      continue;
    }
    TempDir tmp;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      detail::hiprtc_compile(op().name, kernel_source(op()), arch, tmp / "m.hsaco", tmp / "compile.log");
    } catch (const Error& e) {
      if (std::string(e.what()).find("not loadable") != std::string::npos) GTEST_SKIP() << e.what();
      FAIL() << e.what() << "\n" << test::read_file(tmp / "compile.log");
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("hiprtc %s: %s -> %s code object in %.3f s\n", detail::hiprtc_version().c_str(), op().name.c_str(),
                arch.c_str(), s);
    expect_launchable(test::read_file(tmp / "m.hsaco"), arch, "hiprtc code object " + arch, op());
    ++compiled;
  }
  if (compiled == 0) GTEST_SKIP() << "no configured HIP arch is one hiprtc 5.2 handles";
}

// hipcc's offload bundle: a code object for every configured arch, each with every plan and kernel.
TEST_P(HipOp, CodeObjectHasEveryArchAndKernel) {
  if (!op().is_prebuilt("hip")) GTEST_SKIP() << "mode=" << build::mode() << ": " << op().name << "/hip is not prebuilt";
  auto be = detail::make_hip_backend();
  const std::string path = be->prebuilt_path(op());
  const auto entries = test::offload_bundle_entries(test::read_file(path));
  std::vector<std::string> seen;
  for (const auto& e : entries) seen.push_back(e.what);
  for (const auto& arch : build::hip_arch()) {
    bool found = false;
    for (const auto& e : entries)
      if (e.what.size() >= arch.size() && e.what.compare(e.what.size() - arch.size(), arch.size(), arch) == 0 &&
          e.what.find("amdgcn") != std::string::npos) {
        found = true;
        expect_launchable(e.bytes, arch, path + " (" + arch + ")", op());
      }
    EXPECT_TRUE(found) << path << " has no code object for " << arch << "; entries: " << join(seen);
  }
}

// On a device: the loader opens the op's module (plans and every kernel resolved at open time);
// numerical correctness is the correctness suite's job (harness/suites).
TEST_P(HipOp, ModuleOpensOnADevice) {
  const Availability a = Loader::instance().availability("hip");
  if (!a.ok) GTEST_SKIP() << "needs a hip device: " << a.reason;
  const LoadedModule& m = Loader::instance().load(op(), "hip");
  ASSERT_NE(m.info, nullptr);
  EXPECT_STREQ(m.info->backend, "hip");
}

INSTANTIATE_TEST_SUITE_P(GpuOp, HipOp, ::testing::ValuesIn(gpu_ops("hip")),
                         [](const auto& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(HipOp);

#endif  // OPF_HAVE_HIP

}  // namespace
}  // namespace opf
