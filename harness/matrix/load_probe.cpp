#include "matrix/load_probe.h"

#include <chrono>
#include <exception>

#include "opforge/build_info.h"
#include "opforge/loader.h"
#include "opforge/manifest.h"

namespace opf::matrix {
namespace {
// A CPU JIT compiled per (entry, dtype[, variant]) compiles nothing at load: the probe compiles
// (or finds) every one, and reports them as one module would be (jit-compiled when any was
// compiled).
json::Value load_json(Loader& loader, const OpInfo& op, const std::string& backend) {
  const auto t0 = std::chrono::steady_clock::now();
  const LoadedModule& m = loader.load(op, backend);
  json::Value v;
  if (m.source == ModuleSource::jit_specialized) {
    const int compiled = loader.prepare(op, backend);
    v.set("source",
          std::string(module_source_name(compiled > 0 ? ModuleSource::jit_compiled : ModuleSource::jit_cache)));
    v.set("pairs_compiled", compiled);
    v.set("seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  } else {
    v.set("source", std::string(module_source_name(m.source)));
    v.set("seconds", m.load_seconds);
  }
  v.set("path", m.path);
  if (!m.cache_key.empty()) v.set("key", m.cache_key);
  return v;
}
}  // namespace

json::Value run_load_probe() {
  auto& loader = Loader::instance();
  json::Value out;
  out.set("schema", "opforge.probe/1");
  out.set("mode", build::mode());
  json::Value loads = json::Array{};
  for (const auto& op : op_table()) {
    for (const auto& b : op.enabled_backends) {
      json::Value e;
      e.set("op", op.name);
      e.set("backend", b);
      auto avail = loader.availability(b);
      if (!avail.ok) {
        e.set("status", "unavailable");
        e.set("reason", avail.reason);
        loads.push(e);
        continue;
      }
      try {
        e.set("cold", load_json(loader, op, b));
        loader.forget();
        e.set("warm", load_json(loader, op, b));
        e.set("status", "loaded");
      } catch (const std::exception& ex) {
        e.set("status", "failed");
        e.set("reason", ex.what());
      }
      loads.push(e);
    }
  }
  out.set("loads", loads);
  auto st = loader.stats();
  json::Value s;
  s.set("prebuilt_loads", st.prebuilt_loads);
  s.set("cache_hits", st.cache_hits);
  s.set("compiles", st.compiles);
  s.set("lock_waits", st.lock_waits);
  out.set("stats", s);
  return out;
}

}  // namespace opf::matrix
