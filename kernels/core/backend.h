// Internal: what the loader needs from each backend. The loader owns lookup order, cache keys,
// locking and publishing; a backend only knows how to compile, open and feed its modules.
#pragma once

#include <memory>
#include <string>
#include <vector>

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

std::unique_ptr<Backend> make_cpu_backend();
#if OPF_HAVE_CUDA
std::unique_ptr<Backend> make_cuda_backend();
#endif
#if OPF_HAVE_HIP
std::unique_ptr<Backend> make_hip_backend();
#endif

}  // namespace opf::detail
