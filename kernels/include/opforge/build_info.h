// Facts Meson resolved at configure time (generated build_config.h), as C++ values.
#pragma once

#include <string>
#include <vector>

namespace opf::build {

struct Toolchain {
  std::string name;                 // "cpp", "cuda", "hip"
  std::vector<std::string> command; // compiler argv prefix Meson resolved (may be empty)
  std::string id;                   // compiler identity, e.g. "gcc"
  std::string version;              // full version string
};

const std::string& version();       // opforge version
const std::string& mode();          // prebuilt | jit | both
const std::string& source_root();   // absolute path of the source tree
const std::string& build_root();    // absolute path of the build tree
const std::string& module_dir();    // where prebuilt modules live (env OPFORGE_MODULE_DIR overrides)
const Toolchain& cpp_toolchain();
const std::vector<std::string>& cuda_arch();
const std::vector<std::string>& hip_arch();
const std::string& cuda_root();     // "" when the CUDA backend is disabled
bool backend_enabled(const std::string& backend);
std::string backend_compiler_version(const std::string& backend);

}  // namespace opf::build
