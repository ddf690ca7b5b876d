// Where an installed opforge keeps its prebuilt modules, the JIT's sources and its precompiled
// header: one versioned directory, <libdir>/opforge/<version>. It is found from the file this code
// was loaded from, never from a path recorded at build time, so an installed tree keeps working
// wherever it is moved (kernels/install/meson.build installs it):
//
//   libopforge.so in <libdir>                       -> <libdir>/opforge/<version>
//   the opforge CLI (libopforge.a linked in) in <bindir> -> the same directory, reached from <bindir>
//   code running in its build tree (the build tree's CLI and tests, a superproject's build)
//                                                   -> "": the configured build and source trees
//   a program elsewhere with libopforge.a linked in -> the configured prefix's directory, if it exists
//
// Anything else gets the directory where an install would have it, so a moved install that lost
// it fails naming that place, and never falls back to the build machine's trees.
#include <dlfcn.h>
#include <link.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "build_config.h"
#include "opforge/build_info.h"

namespace opf::build {
namespace {
namespace fs = std::filesystem;

// Every install has the JIT's copy of abi.h; a build tree has nothing at these places.
bool is_install(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "kernels" / "include" / "opforge" / "abi.h", ec);
}

struct Self {
  fs::path path;
  bool main_program = false;
};

// The shared library or executable this function is part of.
Self self_object() {
  Dl_info info{};
  link_map* lm = nullptr;
  if (::dladdr1(reinterpret_cast<void*>(&self_object), &info, reinterpret_cast<void**>(&lm), RTLD_DL_LINKMAP) && lm &&
      lm->l_name && *lm->l_name)
    return {fs::absolute(lm->l_name), false};
  // the main program's link map has an empty name (dladdr would give argv[0], maybe relative)
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return {ec ? fs::path() : exe, true};
}

bool inside(const fs::path& p, const fs::path& root) {
  const fs::path rel = p.lexically_relative(root);
  return !rel.empty() && *rel.begin() != "..";
}

std::string locate() {
  const Self self = self_object();
  if (self.path.empty()) return "";
  std::error_code ec;
  const fs::path real = fs::canonical(self.path, ec);
  for (const fs::path& obj : {self.path, real}) {
    if (obj.empty()) continue;
    for (const char* rel : {OPF_INSTALL_FROM_LIBDIR, OPF_INSTALL_FROM_BINDIR}) {
      const fs::path dir = (obj.parent_path() / rel).lexically_normal();
      if (is_install(dir)) return dir.string();
    }
  }
  const fs::path build = fs::weakly_canonical(OPF_GLOBAL_BUILD_ROOT, ec);
  if (!ec && inside(real.empty() ? self.path : real, build)) return "";
  if (is_install(OPF_INSTALL_DIR)) return OPF_INSTALL_DIR;
  const char* rel = self.main_program ? OPF_INSTALL_FROM_BINDIR : OPF_INSTALL_FROM_LIBDIR;
  return (self.path.parent_path() / rel).lexically_normal().string();
}

}  // namespace

const std::string& install_root() {
  static const std::string v = locate();
  return v;
}

}  // namespace opf::build
