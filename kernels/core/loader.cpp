// The loader: prebuilt module of this build -> JIT cache entry -> compile now.
//
// Environment (all optional):
//   OPFORGE_CACHE_DIR            JIT cache root (else $XDG_CACHE_HOME/opforge, else ~/.cache/opforge)
//   OPFORGE_LOCK_TIMEOUT         seconds to wait for another process building the same key (300)
//   OPFORGE_SOURCE_DIR           opforge source tree the JIT compiles from (else the install's copy or
//                                the configured one)
//   OPFORGE_MODULE_DIR           where prebuilt modules are (else the install's or the build tree's)
//   OPFORGE_FORCE_JIT=1          ignore prebuilt modules (tests; comparing prebuilt with JIT)
//   OPFORGE_TUNE_<OP>_<NAME>=v   override a manifest tuning value; implies JIT for that op
//   OPFORGE_JIT_VERBOSE=1        say on stderr when a module is compiled, or waited for
//   OPFORGE_JIT_PCH=path|0       the CPU JIT's precompiled header (core/cpu_jit.h); 0: none
//   OPFORGE_JIT_SPECIALIZE=0     CPU JIT: one module with every entry and dtype, compiled at load,
//                                instead of a module per (entry, dtype[, variant]) compiled at its
//                                first call (variant: the values of the params the manifest marks
//                                jit_variant for that entry) and joined to the op's host code, one
//                                module per op (cpu/dispatch.h)
// One mutex serialises loads in a process (a compile blocks other loads of that process);
// processes coordinate through the per-key flock in core/jit_cache.h.
#include "common/sha256.h"
#include "opforge/loader.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "build_config.h"
#include "core/backend.h"
#include "core/jit_cache.h"
#include "opforge/build_info.h"
#include "opforge/error.h"

namespace opf {

std::string_view module_source_name(ModuleSource s) {
  switch (s) {
    case ModuleSource::prebuilt: return "prebuilt";
    case ModuleSource::jit_cache: return "jit-cache";
    case ModuleSource::jit_compiled: return "jit-compiled";
    case ModuleSource::jit_specialized: return "jit-specialized";
  }
  return "?";
}

std::string cache_root() {
  // absolute, so sidecars, error messages and `opforge clean` name the same place from any cwd
  auto absolute = [](const std::string& p) { return std::filesystem::absolute(p).lexically_normal().string(); };
  if (const char* d = std::getenv("OPFORGE_CACHE_DIR"); d && *d) return absolute(d);
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return absolute(std::string(x) + "/opforge");
  if (const char* h = std::getenv("HOME"); h && *h) return absolute(std::string(h) + "/.cache/opforge");
  throw Error("no cache directory: set OPFORGE_CACHE_DIR (HOME and XDG_CACHE_HOME are unset)");
}

std::vector<CacheItem> list_cache_items(const std::string& root) { return detail::jit::list_cache(root); }
bool remove_cache_item(const CacheItem& item) { return detail::jit::remove_cache_item(item); }

namespace {

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string_view(v) != "0";
}

std::string upper(std::string s) {
  for (auto& c : s) c = char(std::toupper((unsigned char)c));
  return s;
}

std::string number_text(double v) {
  char buf[40];
  if (std::nearbyint(v) == v && std::fabs(v) < 1e15) std::snprintf(buf, sizeof buf, "%lld", (long long)v);
  else std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// Tuning values: the manifest's, unless OPFORGE_TUNE_<OP>_<NAME> overrides one.
// Returns OPF_TUNE_<NAME>=<v> defines; *overridden tells whether any differs from the manifest.
std::vector<std::string> tune_defines(const OpInfo& op, bool* overridden) {
  std::vector<std::string> defs;
  *overridden = false;
  for (const auto& [name, value] : op.tune) {
    std::string v = number_text(value);
    const std::string env = "OPFORGE_TUNE_" + upper(op.name) + "_" + upper(name);
    if (const char* e = std::getenv(env.c_str()); e && *e) {
      char* end = nullptr;
      double d = std::strtod(e, &end);
      if (end == e || *end || !std::isfinite(d)) throw Error(env + "='" + e + "' is not a number");
      if (number_text(d) != v) *overridden = true;
      v = number_text(d);
    }
    defs.push_back("OPF_TUNE_" + upper(name) + "=" + v);
  }
  return defs;
}

// Where the JIT finds op sources: $OPFORGE_SOURCE_DIR (a project root containing kernels/), else
// the install's copy, else the source tree recorded at configure time.
detail::JitSource jit_source(const OpInfo& op, std::string_view backend) {
  const char* env = std::getenv("OPFORGE_SOURCE_DIR");
  const std::string root = env && *env ? std::string(env) : build::jit_source_root();
  const std::string kernels = root + "/kernels";
  detail::JitSource src;
  src.main_file = kernels + "/ops/" + op.name + "/" + (backend == "cpu" ? "cpu.cpp" : "kernel.cu");
  src.include_dirs = {kernels + "/include", kernels};
  bool overridden = false;
  src.defines = tune_defines(op, &overridden);
  struct stat st;
  if (::stat(src.main_file.c_str(), &st) != 0)
    throw Error("JIT source " + src.main_file + " of op '" + op.name +
                "' is missing (set OPFORGE_SOURCE_DIR to the opforge source tree)");
  return src;
}

bool tuning_overridden(const OpInfo& op) {
  bool o = false;
  tune_defines(op, &o);
  return o;
}

// One (entry, storage dtype, variant) specialization's source: the op's kernels for it, with the
// macros of cpu/dispatch.h, cpu/storage.h and cpu/variant.h.
detail::JitSource pair_source(const OpInfo& op, std::string_view backend, const std::string& entry,
                              const std::string& dtype, const std::string& variant) {
  detail::JitSource src = jit_source(op, backend);
  src.defines.push_back("OPF_JIT_KERNELS=\"" + op.name + "\"");
  src.defines.push_back("OPF_JIT_ENTRY=\"" + entry + "\"");
  src.defines.push_back("OPF_JIT_STORAGE=OPF_" + upper(dtype));
  if (!variant.empty()) src.defines.push_back("OPF_JIT_VARIANT=\"" + variant + "\"");
  return src;
}

// The op's host code, which every pair's kernels run under (cpu/dispatch.h): compiled once per op.
detail::JitSource host_source(const OpInfo& op, std::string_view backend) {
  detail::JitSource src = jit_source(op, backend);
  src.defines.push_back("OPF_JIT_HOST=1");
  return src;
}

// The variant a call to `entry` needs, from its param values. A call whose params do not match the
// manifest's count gets the defaults' variant, whose module then rejects it with the op's own
// one-line reason.
std::string call_variant(const OpInfo& op, const std::string& entry, const opf_call* c) {
  const bool given = c && c->params && c->nparams >= 0 && size_t(c->nparams) == op.params.size();
  std::string v;
  for (size_t i = 0; i < op.params.size(); ++i) {
    const ParamInfo& p = op.params[i];
    if (!p.splits_jit(entry)) continue;
    double x = p.def;
    if (given) x = c->params[i].type == OPF_PARAM_F64 ? c->params[i].f64 : double(c->params[i].i64);
    p.append_jit_variant(&v, p.jit_variant_of(x));
  }
  return v;
}

// CPU JIT modules are compiled per (entry, storage dtype) unless OPFORGE_JIT_SPECIALIZE=0.
bool specialize_cpu_jit() {
  const char* v = std::getenv("OPFORGE_JIT_SPECIALIZE");
  return !(v && std::string_view(v) == "0");
}
bool specialized_jit(const OpInfo& op, std::string_view backend) {
  return backend == "cpu" && !op.entries.empty() && !op.dtypes.empty() && specialize_cpu_jit();
}

void verbose(const std::string& msg) {
  if (env_flag("OPFORGE_JIT_VERBOSE")) std::fprintf(stderr, "opforge: %s\n", msg.c_str());
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

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

  // JIT cache entry -> compile now. `what` names the module in messages ("layer_norm/cpu",
  // "layer_norm/cpu forward f16"). Called with mu held.
  // Stats go to `st`: a host module loads on a thread of its own (specialization()).
  LoadedModule load_jit(const OpInfo& op, detail::Backend& be, const detail::JitSource& src, const std::string& what) {
    return load_jit(op, be, src, what, stats);
  }
  LoadedModule load_jit(const OpInfo& op, detail::Backend& be, const detail::JitSource& src, const std::string& what,
                        LoaderStats& st) {
    namespace jit = detail::jit;
    const jit::Key key = jit::compute_key(op, be, src);
    const std::string dir = cache_root() + "/" + op.name + "/" + be.name();
    const std::string entry = dir + "/" + key.key, artefact = be.artefact_name();
    LoadedModule m;
    m.cache_key = key.key;
    m.path = entry + "/" + artefact;

    // Fast path: a valid published entry needs no lock (entries are immutable once renamed in).
    if (jit::check_entry(entry, artefact).valid) {
      m.info = be.open(op, m.path);
      m.source = ModuleSource::jit_cache;
      ++st.cache_hits;
      return m;
    }

    jit::make_dirs(dir);
    const auto wait_start = std::chrono::system_clock::now();
    bool waited = false;
    const std::string lock_path = dir + "/" + key.key + ".lock";
    jit::KeyLock lock(lock_path, jit::lock_timeout_seconds(), &waited, [&](const std::string& holder) {
      verbose("waiting for JIT lock " + lock_path + " held by " + holder);
    });
    if (waited) ++st.lock_waits;

    const jit::EntryCheck check = jit::check_entry(entry, artefact);
    if (check.valid) {  // another process built it while we waited
      m.info = be.open(op, m.path);
      m.source = ModuleSource::jit_cache;
      ++st.cache_hits;
      return m;
    }
    if (check.exists) {
      std::fprintf(stderr, "opforge: discarding corrupt JIT cache entry %s (%s); rebuilding\n", entry.c_str(),
                   check.problem.c_str());
      jit::remove_tree(entry);
    }
    const std::string failed = entry + ".failed";
    if (waited) throw_if_failed_since(failed, wait_start, what);
    compile_and_publish(op, be, src, key, dir, what, st);
    m.info = be.open(op, m.path);
    m.source = ModuleSource::jit_compiled;
    return m;
  }

  // The builder we waited for failed (its .failed entry is newer than our wait): report its log
  // rather than failing it again silently.
  static void throw_if_failed_since(const std::string& failed, std::chrono::system_clock::time_point wait_start,
                                    const std::string& what) {
    namespace jit = detail::jit;
    struct stat st;
    if (::stat((failed + "/" + jit::kSidecar).c_str(), &st) != 0) return;
    const auto mtime =
        std::chrono::system_clock::time_point(std::chrono::duration_cast<std::chrono::system_clock::duration>(
            std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
    if (mtime >= wait_start - std::chrono::seconds(1))
      throw Error("JIT of " + what + " failed in another process (" +
                  jit::sidecar_field(failed + "/" + jit::kSidecar, "builder") + "); see log " + failed + "/" +
                  jit::kLog);
  }

  // Compiles into a temp dir beside the entry and renames it into place (sidecar last). A failed
  // compile becomes <key>.failed with its log. Called with the key's lock held.
  void compile_and_publish(const OpInfo& op, detail::Backend& be, const detail::JitSource& src,
                           const detail::jit::Key& key, const std::string& dir, const std::string& what,
                           LoaderStats& counts) {
    namespace jit = detail::jit;
    const std::string entry = dir + "/" + key.key, artefact = be.artefact_name(), failed = entry + ".failed";
    // Holding the key's lock means every other builder of this key is gone: their temp dirs
    // (killed builders, or ours from a reused pid) are abandoned.
    jit::remove_stale_temps(dir, key.key);
    const std::string tmp = dir + "/.tmp." + key.key + "." + std::to_string(::getpid());
    jit::make_dirs(tmp);
    const std::string tmp_art = tmp + "/" + artefact, tmp_log = tmp + "/" + jit::kLog;
    jit::Sidecar side{op.name, be.name(), key.key, "ok", artefact, 0, "", 0, &key, ""};
    verbose("JIT-compiling " + what + " into " + entry);
    const auto t0 = std::chrono::steady_clock::now();
    ++counts.compiles;
    try {
      be.compile(op, src, tmp_art, tmp_log);
    } catch (const Error& e) {
      // Keep the log where the error message can point: <key>.failed/compile.log
      side.status = "failed";
      side.compile_seconds = seconds_since(t0);
      side.log = failed + "/" + jit::kLog;
      jit::remove_tree(failed);
      std::string msg = e.what();
      try {
        jit::write_sidecar(tmp, side);
        if (::rename(tmp.c_str(), failed.c_str()) != 0) throw Error("rename failed");
      } catch (const Error&) {
        jit::remove_tree(tmp);
        throw Error(msg);
      }
      const size_t at = msg.find(tmp_log);
      if (at != std::string::npos) msg.replace(at, tmp_log.size(), side.log);
      throw Error(msg);
    }
    side.compile_seconds = seconds_since(t0);
    struct stat st;
    if (::stat(tmp_art.c_str(), &st) != 0) {
      jit::remove_tree(tmp);
      throw Error("JIT of " + what + ": compiler produced no " + artefact);
    }
    side.artefact_size = (long long)st.st_size;
    side.artefact_sha256 = hash::sha256_file(tmp_art);
    jit::write_sidecar(tmp, side);  // last: an entry without it is never trusted
    if (::rename(tmp.c_str(), entry.c_str()) != 0) {
      const int e = errno;
      jit::remove_tree(tmp);
      throw Error("cannot publish JIT cache entry " + entry + ": " + std::strerror(e));
    }
    jit::remove_tree(failed);  // an older failure for this key is no longer news
  }

  // ---- CPU JIT specializations (cpu/storage.h, cpu/variant.h): a module per (entry, storage dtype, variant),
  // compiled at its first call. load() hands out `info`, whose run/supports route each call.
  struct Specialized {
    opf_module_info info{};
    Impl* impl = nullptr;
    OpInfo op;
    detail::Backend* be = nullptr;
    std::string isa;                                        // the first module's
    std::map<std::string, const opf_module_info*> modules;  // "entry dtype[ variant]"; under impl->mu
    const opf_module_info* host = nullptr;                  // the op's host code; under impl->mu
    std::string host_key;                                   // its cache key
    std::deque<opf_module_info> joined;                     // host + a pair's kernels; never erased
  };
  std::map<std::string, std::unique_ptr<Specialized>> specialized;  // "<op>/<backend>"; never erased

  LoadedModule load_specialized(const OpInfo& op, detail::Backend& be) {
    jit_source(op, be.name());  // a missing source fails here, at load, as for a whole module
    const std::string id = op.name + "/" + be.name();
    auto& s = specialized[id];
    if (!s) {
      s = std::make_unique<Specialized>();
      s->impl = this;
      s->op = op;
      s->be = &be;
      s->info = {OPF_ABI_VERSION,  s->op.name.c_str(),    "cpu",  "host (JIT)",
                 &run_specialized, &supports_specialized, s.get()};
    }
    LoadedModule m;
    m.info = &s->info;
    m.source = ModuleSource::jit_specialized;
    m.path = cache_root() + "/" + id;
    return m;
  }

  // The module for one (entry, dtype, variant): the op's host module joined with the pair's kernels
  // module (cpu/dispatch.h), each compiled when the cache has none. `compiled`: the pair's was.
  const opf_module_info* specialization(Specialized& s, const std::string& entry, const std::string& dtype,
                                        const std::string& variant, bool* compiled = nullptr) {
    std::lock_guard lock(mu);
    const std::string key = entry + " " + dtype + (variant.empty() ? "" : " " + variant);
    if (auto it = s.modules.find(key); it != s.modules.end()) return it->second;
    const std::string what = s.op.name + "/" + s.be->name();
    const detail::JitSource src = pair_source(s.op, s.be->name(), entry, dtype, variant);
    LoadedModule kernels;
    // The host module must come from the sources the pair's does: one edited since is loaded again.
    const detail::JitSource host_src = host_source(s.op, s.be->name());
    const std::string host_key = detail::jit::compute_key(s.op, *s.be, host_src).key;
    // The op's first pair (or its sources were edited since the host module loaded): the host
    // code compiles beside the pair's kernels, a compiler each.
    const bool new_host = !s.host || s.host_key != host_key;
    LoaderStats host_stats;
    LoadedModule host;
    std::exception_ptr host_error, kernels_error;
    std::thread host_thread;
    if (new_host)
      host_thread = std::thread([&] {
        try {
          host = load_jit(s.op, *s.be, host_src, what + " host code", host_stats);
        } catch (...) {
          host_error = std::current_exception();
        }
      });
    try {
      kernels = load_jit(s.op, *s.be, src, what + " " + key);
    } catch (...) {
      kernels_error = std::current_exception();
    }
    if (new_host) {
      host_thread.join();
      stats += host_stats;
      if (host_error) std::rethrow_exception(host_error);
    }
    if (kernels_error) std::rethrow_exception(kernels_error);
    if (new_host) {
      s.host = host.info;
      s.host_key = host_key;
    }
    if (!kernels.info->impl)
      throw Error("JIT module " + kernels.path + " holds no kernel table (not built with OPF_JIT_KERNELS)");
    if (compiled) *compiled = kernels.source == ModuleSource::jit_compiled;
    opf_module_info& joined = s.joined.emplace_back(*s.host);
    joined.isa = kernels.info->isa;
    joined.impl = kernels.info->impl;
    if (s.modules.empty() && joined.isa) {
      s.isa = joined.isa;
      s.info.isa = s.isa.c_str();  // set once, before any call through this module returns
    }
    return s.modules[key] = &joined;
  }

  // The op's (entry, dtype, variant) modules, compiled or found now; an empty filter matches all.
  int prepare_specialized(Specialized& s, std::string_view entry, std::string_view dtype, std::string_view variant) {
    int compiled = 0, matched = 0;
    for (const EntryInfo& e : s.op.entries)
      for (const std::string& t : s.op.dtypes)
        for (const std::string& v : s.op.jit_variants(e.name)) {
          if ((!entry.empty() && e.name != entry) || (!dtype.empty() && t != dtype) ||
              (!variant.empty() && v != variant))
            continue;
          ++matched;
          bool pair_compiled = false;
          specialization(s, e.name, t, v, &pair_compiled);
          compiled += pair_compiled;
        }
    if (matched == 0)
      throw Error("op '" + s.op.name + "' has no entry '" + std::string(entry) + "' with dtype '" + std::string(dtype) +
                  "'" + (variant.empty() ? "" : " and JIT variant '" + std::string(variant) + "'"));
    return compiled;
  }

  // The module a call needs: its entry, T from its first storage-rule argument holding a tensor,
  // and the entry's variant. An entry or dtype the op does not have goes to the op's first entry or
  // dtype, whose module then rejects the call with the op's own one-line reason.
  struct Specialization {
    std::string entry, dtype, variant;
  };
  static Specialization specialization_of(const OpInfo& op, const opf_call* c) {
    const EntryInfo* e = c && c->entry ? op.find_entry(c->entry) : nullptr;
    if (!e) e = &op.entries.front();
    std::string dtype = op.dtypes.front();
    for (size_t i = 0; c && c->args && i < e->args.size() && i < size_t(std::max(c->nargs, 0)); ++i) {
      const opf_arg& a = c->args[i];
      if (e->args[i].rule != DTypeRule::storage || a.count < 1 || !a.tensors) continue;
      const int32_t t = a.tensors[0].dtype;
      if (t >= 0 && t < OPF_DTYPE_COUNT) {
        const std::string name(dtype_name(DType(t)));
        if (std::find(op.dtypes.begin(), op.dtypes.end(), name) != op.dtypes.end()) dtype = name;
      }
      break;
    }
    return {e->name, dtype, call_variant(op, e->name, c)};
  }

  static int route(const opf_module_info* self, const opf_call* c, char* err, size_t n, bool execute) {
    auto& s = *static_cast<Specialized*>(self->impl);
    const opf_module_info* m = nullptr;
    try {
      const Specialization w = specialization_of(s.op, c);
      m = s.impl->specialization(s, w.entry, w.dtype, w.variant);
    } catch (const std::exception& e) {
      std::snprintf(err, n, "%s", e.what());
      return 1;
    }
    if (execute) return m->run(m, c, err, n);
    return m->supports ? m->supports(m, c, err, n) : 0;
  }
  static int run_specialized(const opf_module_info* self, const opf_call* c, char* err, size_t n) {
    return route(self, c, err, n, true);
  }
  static int supports_specialized(const opf_module_info* self, const opf_call* c, char* err, size_t n) {
    return route(self, c, err, n, false);
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
  // A module that cannot run here is not worth compiling (and GPU modules cannot be opened).
  if (const Availability a = be.availability(); !a.ok)
    throw Error("cannot load " + id + ": backend '" + std::string(backend) + "' cannot run here: " + a.reason);
  const auto t0 = std::chrono::steady_clock::now();
  LoadedModule m;
  // A tuning override or OPFORGE_FORCE_JIT means the prebuilt module is not what was asked for.
  const bool use_prebuilt = op.is_prebuilt(backend) && !env_flag("OPFORGE_FORCE_JIT") && !tuning_overridden(op);
  if (use_prebuilt) {
    m.path = be.prebuilt_path(op);
    struct stat st;
    if (::stat(m.path.c_str(), &st) != 0)
      throw Error("prebuilt module " + m.path + " is missing (build it with ninja, or set OPFORGE_MODULE_DIR)");
    m.info = be.open(op, m.path);
    m.source = ModuleSource::prebuilt;
    ++impl_->stats.prebuilt_loads;
  } else if (specialized_jit(op, backend)) {
    m = impl_->load_specialized(op, be);
  } else {
    m = impl_->load_jit(op, be, jit_source(op, be.name()), id);
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

CacheState Loader::cache_state(const OpInfo& op, std::string_view backend) const {
  std::lock_guard lock(impl_->mu);
  CacheState cs;
  detail::Backend* be = impl_->backend(backend);
  if (!be) return cs;
  try {
    const std::string dir = cache_root() + "/" + op.name + "/" + std::string(backend) + "/";
    if (specialized_jit(op, backend)) {  // key and dir: the first module's; present: every module's
      cs.present = true;
      for (const EntryInfo& e : op.entries)
        for (const std::string& dtype : op.dtypes)
          for (const std::string& v : op.jit_variants(e.name)) {
            const std::string key = detail::jit::compute_key(op, *be, pair_source(op, backend, e.name, dtype, v)).key;
            const bool there = detail::jit::check_entry(dir + key, be->artefact_name()).valid;
            if (cs.key.empty()) cs.key = key;
            cs.present = cs.present && there;
            ++cs.pairs;
            cs.pairs_present += there;
          }
      // the op's host code too: a cold first call compiles it
      const std::string host = detail::jit::compute_key(op, *be, host_source(op, backend)).key;
      cs.present = cs.present && detail::jit::check_entry(dir + host, be->artefact_name()).valid;
      cs.dir = dir + cs.key;
      return cs;
    }
    const detail::JitSource src = jit_source(op, backend);
    cs.key = detail::jit::compute_key(op, *be, src).key;
    cs.dir = dir + cs.key;
    cs.present = detail::jit::check_entry(cs.dir, be->artefact_name()).valid;
  } catch (const Error&) {
    cs.key.clear();  // sources not reachable from here: no key this build would use
  }
  return cs;
}

int Loader::prepare(const OpInfo& op, std::string_view backend, std::string_view entry, std::string_view dtype,
                    std::string_view variant) {
  const LoadedModule& m = load(op, backend);
  if (m.source != ModuleSource::jit_specialized) return 0;
  return impl_->prepare_specialized(*static_cast<Impl::Specialized*>(m.info->impl), entry, dtype, variant);
}

LoaderStats Loader::stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

void Loader::forget() {
  std::lock_guard lock(impl_->mu);
  impl_->loaded.clear();
  // specialized modules' tables stay valid (callers may hold them); their pairs are looked up again
  for (auto& [id, s] : impl_->specialized) {
    s->modules.clear();
    s->host = nullptr;
  }
}

}  // namespace opf
