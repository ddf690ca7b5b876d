// CPU backend: modules are shared objects exporting `opf_module` (abi.h). Prebuilt modules are
// built by Meson without -march=native (Highway dispatches at run time); JIT modules target the
// host, so the host's CPU model and feature flags are part of their cache key.
#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "core/backend.h"
#include "hwy/highway.h"  // HWY_MAJOR/MINOR/PATCH: the modules compile against this Highway
#include "opforge/build_info.h"
#include "opforge/error.h"

extern char** environ;

namespace opf::detail {
namespace {

class HostDevice final : public Device {
 public:
  void* alloc(size_t bytes) override {
    // 64-byte alignment: full cache lines and aligned AVX-512 loads for every tensor.
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded ? rounded : 64);
    if (!p) throw Error("cpu: out of host memory allocating " + std::to_string(bytes) + " bytes");
    return p;
  }
  void free(void* p) override { std::free(p); }
  void to_device(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void synchronize() override {}
  std::string describe() const override { return "host CPU (" + host_cpu_model() + ")"; }

  static std::string host_cpu_model() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("model name", 0) == 0) {
        auto pos = line.find(':');
        return pos == std::string::npos ? line : line.substr(pos + 2);
      }
    return "unknown";
  }
};

// What -march=native resolves to depends on the host: model name and feature flags.
const std::string& host_cpu_identity() {
  static const std::string id = [] {  // /proc/cpuinfo is generated on every read: read it once
    std::ifstream in("/proc/cpuinfo");
    std::string line, model, flags;
    while (std::getline(in, line) && (model.empty() || flags.empty())) {
      auto pos = line.find(':');
      if (pos == std::string::npos) continue;
      std::string value = pos + 2 <= line.size() ? line.substr(pos + 2) : "";
      if (model.empty() && line.rfind("model name", 0) == 0) model = value;
      if (flags.empty() && line.rfind("flags", 0) == 0) flags = value;
    }
    return "cpu-model=" + model + ";flags=" + flags;
  }();
  return id;
}

// ccache would turn a JIT compile into a cache lookup of its own (and hide compile failures'
// real cost); the opforge cache already plays that role.
std::vector<std::string> jit_compiler() {
  std::vector<std::string> cmd = build::cpp_toolchain().command;
  while (!cmd.empty()) {
    std::string base = cmd.front().substr(cmd.front().rfind('/') + 1);
    if (base != "ccache" && base != "sccache") break;
    cmd.erase(cmd.begin());
  }
  if (cmd.empty()) cmd.push_back("c++");
  return cmd;
}

// Meson's build-type-dependent compiler flags (OPF_CXX_JIT_ARGS, unit-separated).
std::vector<std::string> meson_args() {
  std::vector<std::string> out;
  std::string cur;
  for (const char* p = OPF_CXX_JIT_ARGS;; ++p) {
    if (*p == '\x1f' || *p == 0) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
      if (*p == 0) break;
    } else {
      cur += *p;
    }
  }
  return out;
}

// Absolute, symlink-free path of what posix_spawnp would run for `prog`.
std::string resolve_program(const std::string& prog) {
  auto real = [](const std::string& p) -> std::string {
    std::error_code ec;
    auto r = std::filesystem::canonical(p, ec);
    return ec ? "" : r.string();
  };
  if (prog.find('/') != std::string::npos) return real(prog);
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  for (size_t start = 0; start <= dirs.size();) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string cand = (end > start ? dirs.substr(start, end - start) : ".") + "/" + prog;
    if (::access(cand.c_str(), X_OK) == 0) return real(cand);
    start = end + 1;
  }
  return "not found: " + prog;
}

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  Availability availability() const override { return {true, "host CPU"}; }

  std::string prebuilt_path(const OpInfo& op) const override {
    return build::module_dir() + "/opf_" + op.name + "_cpu.so";
  }

  std::vector<std::string> jit_identity(const OpInfo& op, const JitSource& src) const override {
    std::vector<std::string> id = command_line(op, src, "<out>");
    id.push_back("compiler=" + build::cpp_toolchain().id + " " + build::cpp_toolchain().version);
    // Meson's version is from configure time; the binary PATH finds now is what really runs
    // (Debian's c++ resolves to a versioned file, e.g. x86_64-linux-gnu-g++-12).
    id.push_back("compiler-binary=" + resolve_program(jit_compiler().front()));
    id.push_back(host_cpu_identity());
    id.push_back("highway=" + std::to_string(HWY_MAJOR) + "." + std::to_string(HWY_MINOR) + "." + std::to_string(HWY_PATCH));
    return id;
  }

  std::string artefact_name() const override { return "module.so"; }

  void compile(const OpInfo& op, const JitSource& src, const std::string& out_path,
               const std::string& log_path) const override {
    std::vector<std::string> argv = command_line(op, src, out_path);
    int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) throw Error("cannot write compiler log " + log_path + ": " + std::strerror(errno));
    {
      std::string header;
      for (const auto& a : argv) header += a + ' ';
      header += '\n';
      (void)!::write(log_fd, header.data(), header.size());
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, log_fd, 1);
    posix_spawn_file_actions_adddup2(&fa, log_fd, 2);
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    pid_t pid = 0;
    int rc = posix_spawnp(&pid, cargv[0], &fa, nullptr, cargv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(log_fd);
    if (rc != 0)
      throw Error("cpu JIT of " + op.name + ": cannot run compiler '" + argv[0] + "': " + std::strerror(rc) +
                  " (log: " + log_path + ")");
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      throw Error("cpu JIT of " + op.name + " failed: compiler " +
                  (WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                     : "killed by signal " + std::to_string(WTERMSIG(status))) +
                  "; see log " + log_path);
  }

  const opf_module_info* open(const OpInfo& op, const std::string& path) override {
    std::lock_guard lock(mu_);
    // dlopen() of an already loaded path returns the same handle anyway; keep one reference.
    if (auto it = opened_.find(path); it != opened_.end()) return it->second;
    // RTLD_LOCAL: every module exports the same symbol name; RTLD_NOW: fail here, not mid-call.
    void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) throw Error("cannot load module " + path + ": " + ::dlerror());
    auto fn = reinterpret_cast<opf_module_fn>(::dlsym(h, "opf_module"));
    if (!fn) {
      ::dlclose(h);
      throw Error("module " + path + " does not export opf_module (not an opforge module)");
    }
    const opf_module_info* info = fn();
    std::string why;
    if (!info) why = "opf_module() returned NULL";
    else if (info->abi_version != OPF_ABI_VERSION)
      why = "ABI version " + std::to_string(info->abi_version) + ", expected " + std::to_string(OPF_ABI_VERSION);
    else if (!info->op || op.name != info->op)
      why = std::string("it implements op '") + (info->op ? info->op : "(null)") + "', expected '" + op.name + "'";
    else if (!info->backend || std::string_view(info->backend) != "cpu")
      why = std::string("it is for backend '") + (info->backend ? info->backend : "(null)") + "', expected 'cpu'";
    else if (!info->run)
      why = "its run function is NULL";
    if (!why.empty()) {
      ::dlclose(h);
      throw Error("module " + path + " rejected: " + why);
    }
    opened_[path] = info;  // never dlclose()d: callers hold info pointers for the process's life
    return info;
  }

  Device& device() override { return device_; }

 private:
  std::vector<std::string> command_line(const OpInfo& op, const JitSource& src, const std::string& out) const {
    // Mirrors kernels/meson.build's shared_module() (checked against compile_commands.json):
    // same standard, optimisation, NDEBUG, visibility, include dirs and libhwy's pkg-config
    // cflags (HWY_SHARED_DEFINE: hwy's functions keep default visibility under
    // -fvisibility=hidden). Differs on purpose: -march=native with only the static Highway
    // target (the JIT may target the host; prebuilt modules dispatch at run time).
    std::vector<std::string> argv = jit_compiler();
    for (const auto& f : meson_args()) argv.push_back(f);  // -std, -O, -g, -DNDEBUG, cpp_args
    for (const char* f : {"-D_FILE_OFFSET_BITS=64", "-fPIC", "-shared", "-march=native", "-fvisibility=hidden",
                          "-DHWY_SHARED_DEFINE", "-DHWY_COMPILE_ONLY_STATIC=1", "-DOPF_JIT=1"})
      argv.push_back(f);
    for (const auto& d : src.include_dirs) argv.push_back("-I" + d);
    for (const auto& d : src.defines) argv.push_back("-D" + d);
    argv.push_back(src.main_file);
    argv.push_back("-o");
    argv.push_back(out);
    argv.push_back("-lhwy");
    for (const auto& lib : op.deps_of("cpu")) argv.push_back("-l" + lib);  // the manifest's deps, as Meson links them
    return argv;
  }

  std::mutex mu_;
  std::unordered_map<std::string, const opf_module_info*> opened_;
  HostDevice device_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace opf::detail
