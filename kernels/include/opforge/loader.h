// The module loader: prebuilt module of this build -> JIT cache entry -> compile now.
// Every backend produces the same kind of module (see abi.h); callers never care which path won.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "opforge/abi.h"
#include "opforge/manifest.h"

namespace opf {

// Memory and synchronisation for a backend's tensors. The CPU device is plain host memory.
class Device {
 public:
  virtual ~Device() = default;
  virtual void* alloc(size_t bytes) = 0;
  virtual void free(void* p) = 0;
  virtual void to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void to_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void synchronize() = 0;
  virtual std::string describe() const = 0;  // e.g. "NVIDIA H100 (sm_90)"
  // Device-to-device copy, waited for (the GPU benchmarks' copy probe).
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // Seconds the device spends on the work `enqueue` puts on the default stream: GPUs record events
  // around it and wait for the second (launch overhead on the host is not counted); the host
  // device times enqueue() itself.
  virtual double time(const std::function<void()>& enqueue) = 0;
  // The device's last-level cache in bytes (GPU: L2), 0 when unknown: benchmarks rotate their
  // inputs through more than this.
  virtual size_t cache_bytes() const = 0;
};

// jit_specialized: a CPU JIT module whose (entry, storage dtype[, variant]) modules are compiled,
// or found in the cache, at each one's first call (run or supports); load() itself compiles
// nothing. The variant: the values of the params the manifest marks jit_variant for the entry.
enum class ModuleSource { prebuilt, jit_cache, jit_compiled, jit_specialized };
std::string_view module_source_name(ModuleSource s);

struct LoadedModule {
  const opf_module_info* info = nullptr;
  ModuleSource source = ModuleSource::prebuilt;
  std::string path;         // the artefact that was loaded
  std::string cache_key;    // JIT only
  double load_seconds = 0;  // wall time of this load (compile included when compiled)
};

struct LoaderStats {
  int prebuilt_loads = 0;
  int cache_hits = 0;
  int compiles = 0;    // compiler (or NVRTC/hiprtc) runs done by this process
  int lock_waits = 0;  // times another process held the key's lock

  LoaderStats& operator+=(const LoaderStats& o) {
    prebuilt_loads += o.prebuilt_loads;
    cache_hits += o.cache_hits;
    compiles += o.compiles;
    lock_waits += o.lock_waits;
    return *this;
  }
};

// Why a backend can or cannot run here, without side effects (no context is created).
struct Availability {
  bool ok = false;
  std::string reason;  // "no CUDA driver (libcuda.so.1 not loadable)", ...
};

// State of one op x backend in the JIT cache, for `opforge ops` / `opforge clean`.
struct CacheState {
  std::string key;       // key this build would use ("" if not computable)
  bool present = false;  // published entry for that key exists
  std::string dir;       // <cache>/<op>/<backend>/<key>
  // A CPU JIT compiled per (entry, dtype[, variant]): key and dir are the first module's, present
  // means every one's entry exists, and the op's host module's; pairs / pairs_present count the
  // pairs (0 for a whole-module JIT).
  int pairs = 0, pairs_present = 0;
};

class Loader {
 public:
  static Loader& instance();

  // Throws opf::Error (one line) when the module cannot be produced.
  const LoadedModule& load(const OpInfo& op, std::string_view backend);
  Availability availability(std::string_view backend) const;
  Device& device(std::string_view backend);  // throws when not available
  CacheState cache_state(const OpInfo& op, std::string_view backend) const;
  // load(), then for a jit_specialized module its (entry, dtype[, variant]) modules now (compiled
  // or from the cache): all of them, or those of `entry` / `dtype` / `variant` (one of
  // OpInfo::jit_variants) when given, and the op's host module with the first. Returns how many
  // pairs' modules were compiled (the host module is not counted); 0 for other modules. Throws opf::Error like load(),
  // or when nothing matches the filter.
  int prepare(const OpInfo& op, std::string_view backend, std::string_view entry = {}, std::string_view dtype = {},
              std::string_view variant = {});
  LoaderStats stats() const;

  // Drops loaded modules from this process's table (tests: force a fresh lookup).
  void forget();

  struct Impl;

 private:
  Loader();
  std::unique_ptr<Impl> impl_;
};

// Cache root: $OPFORGE_CACHE_DIR, else $XDG_CACHE_HOME/opforge, else ~/.cache/opforge.
std::string cache_root();

// What `opforge clean` removes: the opforge-made things under a cache root (published and failed
// entries, abandoned build dirs, free lock files), recognised by the cache layout and an opforge
// sidecar; a user's file in the cache directory is never listed.
struct CacheItem {
  std::string path;
  std::string kind;  // "entry", "failed", "temp", "lock"
  std::string op, backend;
  long long bytes = 0;
};
std::vector<CacheItem> list_cache_items(const std::string& root);
// Removes one listed item (a lock file only while nobody holds it), then its backend and op
// directories if that left them empty. Returns false when the item could not be removed.
bool remove_cache_item(const CacheItem& item);

}  // namespace opf
