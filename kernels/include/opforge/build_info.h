// Facts Meson resolved at configure time (generated build_config.h), as C++ values.
#pragma once

#include <string>
#include <vector>

namespace opf::build {

struct Toolchain {
  std::string name;                  // "cpp", "cpu-jit", "cuda", "hip"
  std::vector<std::string> command;  // compiler argv prefix Meson resolved (may be empty)
  std::string id;                    // compiler identity, e.g. "gcc"
  std::string version;               // full version string
};

const std::string& version();  // opforge version
const std::string& mode();     // prebuilt | jit | both
// The trees this opforge was configured and built in; "" when it runs from an install (an
// installed opforge never reads the build machine's trees: see install_root()).
const std::string& source_root();  // absolute path of the source tree
const std::string& build_root();   // absolute path of the build tree
// <libdir>/opforge/<version> when this code runs from an installed library or CLI, else ""
// (core/install_root.cpp says how it is found).
const std::string& install_root();
const std::string& module_dir();  // prebuilt modules: $OPFORGE_MODULE_DIR, the install's modules/, or the build tree's
const std::string& jit_source_root();  // the tree whose kernels/ the JIT compiles: the install's, or the source tree
const std::string& jit_pch_header();   // the CPU JIT's precompiled header (core/cpu_jit.h); "" when there is none
const Toolchain& cpp_toolchain();      // the C++ compiler Meson builds with
const Toolchain& cpu_jit_toolchain();  // the one the CPU JIT runs (meson option cpu_jit_cxx)
const std::vector<std::string>& cpu_jit_link_args();  // how the CPU JIT links a module (-fuse-ld=lld where found)
const std::vector<std::string>& cuda_arch();
const std::vector<std::string>& hip_arch();
const std::string& cuda_root();  // "" when the CUDA backend is disabled
bool backend_enabled(const std::string& backend);
std::string backend_compiler_version(const std::string& backend);

}  // namespace opf::build
