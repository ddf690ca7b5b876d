// The loader: prebuilt module of this build -> JIT cache entry -> compile now.
#include "opforge/loader.h"

#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>

#include "build_config.h"
#include "core/backend.h"
#include "opforge/build_info.h"
#include "opforge/error.h"

namespace opf {

std::string_view module_source_name(ModuleSource s) {
  switch (s) {
    case ModuleSource::prebuilt: return "prebuilt";
    case ModuleSource::jit_cache: return "jit-cache";
    case ModuleSource::jit_compiled: return "jit-compiled";
  }
  return "?";
}

std::string cache_root() {
  if (const char* d = std::getenv("OPFORGE_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/opforge";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/opforge";
  throw Error("no cache directory: set OPFORGE_CACHE_DIR (HOME and XDG_CACHE_HOME are unset)");
}

struct Loader::Impl {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<detail::Backend>> backends;
  std::map<std::string, LoadedModule> loaded;  // "<op>/<backend>"
  LoaderStats stats;

  // nullptr when this build has no such backend
  detail::Backend* backend(std::string_view name) {
    auto it = backends.find(std::string(name));
    if (it != backends.end()) return it->second.get();
    std::unique_ptr<detail::Backend> b;
    if (name == "cpu" && OPF_HAVE_CPU) b = detail::make_cpu_backend();
#if OPF_HAVE_CUDA && defined(OPF_HAVE_CUDA_BACKEND)
    if (name == "cuda") b = detail::make_cuda_backend();
#endif
#if OPF_HAVE_HIP && defined(OPF_HAVE_HIP_BACKEND)
    if (name == "hip") b = detail::make_hip_backend();
#endif
    if (!b) return nullptr;
    return (backends[std::string(name)] = std::move(b)).get();
  }

  detail::Backend& require_backend(std::string_view name) {
    detail::Backend* b = backend(name);
    if (!b) throw Error("backend '" + std::string(name) + "' is not built into this opforge (see `opforge ops`)");
    return *b;
  }
};

Loader& Loader::instance() {
  static Loader l;
  return l;
}

Loader::Loader() : impl_(std::make_unique<Impl>()) {}

const LoadedModule& Loader::load(const OpInfo& op, std::string_view backend) {
  std::lock_guard lock(impl_->mu);
  const std::string id = op.name + "/" + std::string(backend);
  if (auto it = impl_->loaded.find(id); it != impl_->loaded.end()) return it->second;
  if (!op.has_backend(backend))
    throw Error("op '" + op.name + "' has no enabled backend '" + std::string(backend) + "' in this build");
  detail::Backend& be = impl_->require_backend(backend);
  const auto t0 = std::chrono::steady_clock::now();
  LoadedModule m;
  if (op.is_prebuilt(backend)) {
    m.path = be.prebuilt_path(op);
    struct stat st;
    if (::stat(m.path.c_str(), &st) != 0)
      throw Error("prebuilt module " + m.path + " is missing (build it with ninja, or set OPFORGE_MODULE_DIR)");
    m.info = be.open(op, m.path);
    m.source = ModuleSource::prebuilt;
    ++impl_->stats.prebuilt_loads;
  } else {
    throw Error("JIT for " + id + " is not implemented yet");
  }
  m.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return impl_->loaded[id] = std::move(m);
}

Availability Loader::availability(std::string_view backend) const {
  std::lock_guard lock(impl_->mu);
  detail::Backend* b = impl_->backend(backend);
  if (!b) return {false, "backend '" + std::string(backend) + "' is not built into this opforge"};
  return b->availability();
}

Device& Loader::device(std::string_view backend) {
  std::lock_guard lock(impl_->mu);
  detail::Backend& b = impl_->require_backend(backend);
  Availability a = b.availability();
  if (!a.ok) throw Error("backend '" + std::string(backend) + "' cannot run here: " + a.reason);
  return b.device();
}

CacheState Loader::cache_state(const OpInfo&, std::string_view) const { return {}; }

LoaderStats Loader::stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

void Loader::forget() {
  std::lock_guard lock(impl_->mu);
  impl_->loaded.clear();
}

}  // namespace opf
