// CPU backend: modules are shared objects exporting `opf_module` (abi.h). Prebuilt modules are
// built by Meson without -march=native (Highway dispatches at run time); JIT modules target the
// host, so the host's CPU model and feature flags are part of their cache key. The JIT's command
// line and precompiled header: core/cpu_jit.h.
#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <functional>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "common/shared_library.h"
#include "core/backend.h"
#include "core/cpu_jit.h"
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
  void copy(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  double time(const std::function<void()>& enqueue) override {
    const auto t0 = std::chrono::steady_clock::now();
    enqueue();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  size_t cache_bytes() const override { return 0; }  // the CPU benchmarks evict caches instead

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

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  Availability availability() const override { return {true, "host CPU"}; }

  std::string prebuilt_path(const OpInfo& op) const override {
    return build::module_dir() + "/opf_" + op.name + "_cpu.so";
  }

  std::vector<std::string> jit_identity(const OpInfo& op, const JitSource& src) const override {
    const Command cmd = command_line(op, src, "<out>", /*fresh=*/false);
    std::vector<std::string> id = cmd.argv;
    id.push_back("compiler=" + build::cpu_jit_toolchain().id + " " + build::cpu_jit_toolchain().version);
    // Meson's version is from configure time; the binary PATH finds now is what really runs
    // (Debian's c++ resolves to a versioned file, e.g. x86_64-linux-gnu-g++-12).
    id.push_back("compiler-binary=" + cpu_jit::resolve_program(cmd.argv.front()));
    // what the PCH was built from (the -include path alone would not change with its content)
    if (cmd.pch.usable) id.push_back("pch=" + cmd.pch.identity);
    id.push_back(host_cpu_identity());
    id.push_back("highway=" + std::to_string(HWY_MAJOR) + "." + std::to_string(HWY_MINOR) + "." +
                 std::to_string(HWY_PATCH));
    return id;
  }

  std::string artefact_name() const override { return "module.so"; }

  void compile(const OpInfo& op, const JitSource& src, const std::string& out_path,
               const std::string& log_path) const override {
    const Command cmd = command_line(op, src, out_path, /*fresh=*/true);
    std::vector<std::string> argv = cmd.argv;
    if (!cmd.pch.usable && cmd.pch_wanted && cmd.pch.notable)
      warn_once("not using the CPU JIT's precompiled header (" + cmd.pch.why +
                "): compiling without it; rebuild with ninja");
    else if (!cmd.pch.usable && cmd.pch_wanted && verbose())
      std::fprintf(stderr, "opforge: compiling %s without the precompiled header: %s\n", op.name.c_str(),
                   cmd.pch.why.c_str());
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
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      throw Error("cpu JIT of " + op.name + " failed: compiler " +
                  (WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                     : "killed by signal " + std::to_string(WTERMSIG(status))) +
                  "; see log " + log_path);
    // GCC falls back to the header's text when it rejects a .gch: a correct but slow compile.
    // -Winvalid-pch makes it say so; a rejected PCH means its flags drifted from the JIT's.
    // (Clang rejects one with an error: the compile fails, its log says why.)
    if (cmd.pch.usable) {
      std::ifstream log(log_path);
      std::string line;
      while (std::getline(log, line))
        if (line.find("-Winvalid-pch") != std::string::npos && line.find("warning") != std::string::npos) {
          warn_once("the compiler rejected the CPU JIT's precompiled header: " + line);
          break;
        }
    }
  }

  const opf_module_info* open(const OpInfo& op, const std::string& path) override {
    std::lock_guard lock(mu_);
    // dlopen() of an already loaded path returns the same handle anyway; keep one reference.
    if (auto it = opened_.find(path); it != opened_.end()) return it->second;
    // RTLD_LOCAL: every module exports the same symbol name; RTLD_NOW: fail here, not mid-call.
    SharedLibrary lib = SharedLibrary::open(path, RTLD_NOW | RTLD_LOCAL, "cannot load module " + path);
    auto fn = lib.symbol<opf_module_fn>("opf_module");
    if (!fn) throw Error("module " + path + " does not export opf_module (not an opforge module)");
    const opf_module_info* info = fn();
    std::string why;
    if (!info) why = "opf_module() returned NULL";
    else if (info->abi_version != OPF_ABI_VERSION)
      why = "ABI version " + std::to_string(info->abi_version) + ", expected " + std::to_string(OPF_ABI_VERSION);
    else if (!info->op || op.name != info->op)
      why = std::string("it implements op '") + (info->op ? info->op : "(null)") + "', expected '" + op.name + "'";
    else if (!info->backend || std::string_view(info->backend) != "cpu")
      why = std::string("it is for backend '") + (info->backend ? info->backend : "(null)") + "', expected 'cpu'";
    else if (!info->run) why = "its run function is NULL";
    if (!why.empty()) throw Error("module " + path + " rejected: " + why);
    lib.release();  // never dlclose()d: callers hold info pointers for the process's life
    opened_[path] = info;
    return info;
  }

  Device& device() override { return device_; }

 private:
  struct Command {
    std::vector<std::string> argv;
    bool pch_wanted = false;  // the source may use the PCH (source_disables_fp_contract)
    cpu_jit::PchCheck pch;
  };

  // The PCH is checked again for every compile (fresh): one that went stale since the key was
  // computed is not used (the artefact is the same either way, only slower to make).
  Command command_line(const OpInfo& op, const JitSource& src, const std::string& out, bool fresh) const {
    Command c;
    c.pch_wanted = cpu_jit::source_disables_fp_contract(src.main_file);
    c.argv = cpu_jit::base_command(c.pch_wanted);
    if (c.pch_wanted) {
      c.pch = cpu_jit::find_pch(c.argv, src.include_dirs, fresh);
      if (c.pch.usable)
        for (const auto& a : {std::string("-Winvalid-pch"), std::string("-include"), c.pch.header}) c.argv.push_back(a);
    }
    for (const auto& d : src.include_dirs) c.argv.push_back("-I" + d);
    for (const auto& d : src.defines) c.argv.push_back("-D" + d);
    c.argv.push_back(src.main_file);
    c.argv.push_back("-o");
    c.argv.push_back(out);
    for (const auto& a : build::cpu_jit_link_args()) c.argv.push_back(a);
    c.argv.push_back("-lhwy");
    for (const auto& lib : op.deps_of("cpu")) c.argv.push_back("-l" + lib);  // the manifest's deps, as Meson links them
    return c;
  }

  static bool verbose() {
    const char* v = std::getenv("OPFORGE_JIT_VERBOSE");
    return v && *v && std::string_view(v) != "0";
  }
  static void warn_once(const std::string& msg) {  // per process: every compile would repeat it
    static std::mutex mu;
    static std::set<std::string> said;
    std::lock_guard lock(mu);
    if (said.insert(msg).second) std::fprintf(stderr, "opforge: %s\n", msg.c_str());
  }

  std::mutex mu_;
  std::unordered_map<std::string, const opf_module_info*> opened_;
  HostDevice device_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace opf::detail
