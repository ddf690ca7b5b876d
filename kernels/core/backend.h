// Internal: what the loader needs from each backend. The loader owns lookup order, cache keys,
// locking and publishing; a backend only knows how to compile, open and feed its modules.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "build_config.h"
#include "opforge/abi.h"
#include "opforge/loader.h"
#include "opforge/manifest.h"

namespace opf::detail {

struct JitSource {
  std::string main_file;                  // absolute path: ops/<op>/cpu.cpp or kernel.cu
  std::vector<std::string> include_dirs;  // where local ("...") headers are found; all hashed
  std::vector<std::string> defines;       // NAME=VALUE, tuning (OPF_TUNE_*) and backend macros
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Can modules run here? Must not create a device context or otherwise change state.
  virtual Availability availability() const = 0;
  // The artefact Meson builds for this op in mode=prebuilt/both (may not exist).
  virtual std::string prebuilt_path(const OpInfo& op) const = 0;
  // Everything besides source text that changes the artefact: the full compiler command line or
  // option list, compiler identity and version, target arch. Hashed into the cache key.
  virtual std::vector<std::string> jit_identity(const OpInfo& op, const JitSource& src) const = 0;
  virtual std::string artefact_name() const = 0;  // "module.so", "module.cubin", "module.hsaco"
  // Compiles into out_path, writing the compiler's output to log_path. Throws opf::Error with a
  // one-line message naming log_path on failure.
  virtual void compile(const OpInfo& op, const JitSource& src, const std::string& out_path,
                       const std::string& log_path) const = 0;
  // Opens an artefact and returns its module table; throws opf::Error if it is unusable
  // (truncated, wrong ABI). The table lives as long as the backend.
  virtual const opf_module_info* open(const OpInfo& op, const std::string& path) = 0;
  virtual Device& device() = 0;  // throws opf::Error when !availability().ok
};

// Factories, one per backend file. The loader (core/loader.cpp) calls a GPU factory only under
//   #if OPF_HAVE_CUDA && defined(OPF_HAVE_CUDA_BACKEND)     (resp. HIP)
// so the build works before the backend file exists. kernels/gpu/meson.build adds
// core/cuda_backend.cpp to core_sources and '-DOPF_HAVE_CUDA_BACKEND' to core_args in the same
// change (likewise hip_backend.cpp / OPF_HAVE_HIP_BACKEND). OPF_HAVE_* come from build_config.h.
// Contract reminders for backend authors (the loader relies on these):
//  - availability() and prebuilt_path() must be cheap and side-effect free (`opforge ops` calls them).
//  - jit_identity() must list everything but source text that changes the artefact; the loader
//    hashes it with the sources, tuning defines and the opforge version into the cache key.
//  - compile() writes exactly out_path (inside a private temp dir) and log_path; it must not
//    touch the cache layout itself. open() validates abi_version/op/backend.
std::unique_ptr<Backend> make_cpu_backend();
#if OPF_HAVE_CUDA
std::unique_ptr<Backend> make_cuda_backend();
#endif
#if OPF_HAVE_HIP
std::unique_ptr<Backend> make_hip_backend();
#endif

}  // namespace opf::detail
