#include "opforge/build_info.h"

#include <cstdlib>

#include "build_config.h"

namespace opf::build {
namespace {

std::vector<std::string> split_units(const char* s) {
  std::vector<std::string> out;
  std::string cur;
  for (const char* p = s; *p; ++p) {
    if (*p == '\x1f') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += *p;
    }
  }
  if (!cur.empty() || !out.empty()) out.push_back(cur);
  return out;
}

}  // namespace

const std::string& version() {
  static const std::string v = OPF_VERSION;
  return v;
}
const std::string& mode() {
  static const std::string v = OPF_MODE;
  return v;
}
const std::string& source_root() {
  static const std::string v = install_root().empty() ? OPF_SOURCE_ROOT : "";
  return v;
}
const std::string& build_root() {
  static const std::string v = install_root().empty() ? OPF_BUILD_ROOT : "";
  return v;
}

const std::string& module_dir() {
  static const std::string v = [] {
    const char* env = std::getenv("OPFORGE_MODULE_DIR");
    if (env && *env) return std::string(env);
    return install_root().empty() ? std::string(OPF_MODULE_DIR) : install_root() + "/modules";
  }();
  return v;
}

const std::string& jit_source_root() {
  static const std::string v = install_root().empty() ? source_root() : install_root();
  return v;
}

const std::string& jit_pch_header() {
  // An install carries the bundle exactly when the build made one (kernels/install/meson.build).
  static const std::string v =
      install_root().empty() || !*OPF_JIT_PCH ? std::string(OPF_JIT_PCH) : install_root() + "/jit/opf_jit_pch.h";
  return v;
}

const Toolchain& cpp_toolchain() {
  static const Toolchain t{"cpp", split_units(OPF_CXX_COMMAND), OPF_CXX_ID, OPF_CXX_VERSION};
  return t;
}
const Toolchain& cpu_jit_toolchain() {
  static const Toolchain t{"cpu-jit", split_units(OPF_JIT_CXX_COMMAND), OPF_JIT_CXX_ID, OPF_JIT_CXX_VERSION};
  return t;
}
const std::vector<std::string>& cpu_jit_link_args() {
  static const auto v = split_units(OPF_JIT_LINK_ARGS);
  return v;
}

const std::vector<std::string>& cuda_arch() {
  static const auto v = split_units(OPF_CUDA_ARCH);
  return v;
}
const std::vector<std::string>& hip_arch() {
  static const auto v = split_units(OPF_HIP_ARCH);
  return v;
}
const std::string& cuda_root() {
  static const std::string v = OPF_CUDA_ROOT;
  return v;
}

bool backend_enabled(const std::string& backend) {
  if (backend == "cpu") return OPF_HAVE_CPU;
  if (backend == "cuda") return OPF_HAVE_CUDA;
  if (backend == "hip") return OPF_HAVE_HIP;
  return false;
}

std::string backend_compiler_version(const std::string& backend) {
  if (backend == "cpu") return std::string(OPF_CXX_ID) + " " + OPF_CXX_VERSION;
  if (backend == "cuda") return OPF_NVCC_VERSION;
  if (backend == "hip") return OPF_HIPCC_VERSION;
  return "";
}

}  // namespace opf::build
