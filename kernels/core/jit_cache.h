// Internal: the JIT cache on disk. One entry per (op, backend, key):
//
//   <root>/<op>/<backend>/<key>/           published entry: artefact + compile.log + meta.json
//   <root>/<op>/<backend>/<key>.lock        per-key flock (never deleted while in use)
//   <root>/<op>/<backend>/<key>.failed/     last failed build: compile.log + meta.json
//   <root>/<op>/<backend>/.tmp.<key>.<pid>  a build in progress (or left by a killed builder)
//
// The key hashes everything that changes the artefact (never mtimes). An entry is valid only when
// its sidecar (meta.json, written last, before the atomic rename) records the artefact's size and
// SHA-256 and the file on disk still matches: a truncated module is never dlopen()ed (SIGBUS).
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "opforge/loader.h"

namespace opf::detail::jit {

// The source file plus every local header reachable through `#include "..."` (searched like the
// compiler does: the including file's directory, then include_dirs). System <...> headers and
// quoted headers found nowhere local are not followed. Sorted by path, main file first.
std::vector<std::string> local_sources(const JitSource& src);

struct Key {
  std::string key;                                           // 32 hex digits
  std::vector<std::string> inputs;                           // what was hashed besides sources
  std::vector<std::pair<std::string, std::string>> sources;  // path -> sha256
};
Key compute_key(const OpInfo& op, const Backend& backend, const JitSource& src);

// Per-key exclusive lock. flock() is released by the kernel when the holder dies, so a killed
// builder never leaves a stale lock; the fd is O_CLOEXEC so compiler children don't hold it.
class KeyLock {
 public:
  // Waits at most timeout_s; throws opf::Error naming the lock file and its holder on timeout.
  // on_first_wait(holder) runs once, when the lock is first found taken (before any sleep).
  KeyLock(const std::string& path, double timeout_s, bool* waited,
          const std::function<void(const std::string& holder)>& on_first_wait = nullptr);
  ~KeyLock();
  KeyLock(const KeyLock&) = delete;
  KeyLock& operator=(const KeyLock&) = delete;
  // Non-blocking probe: true when nobody holds the lock (it is taken and released again).
  static bool is_free(const std::string& path);

 private:
  int fd_ = -1;
};

double lock_timeout_seconds();  // $OPFORGE_LOCK_TIMEOUT, default 300

struct EntryCheck {
  bool valid = false;
  bool exists = false;  // the entry directory exists (valid or not)
  std::string problem;  // why an existing entry is not valid
};
EntryCheck check_entry(const std::string& entry_dir, const std::string& artefact_name);

// Creates dir and its parents; throws a one-line error when it cannot or is not writable.
void make_dirs(const std::string& dir);
void remove_tree(const std::string& path);  // best effort, like rm -rf
// Removes <dir>/.tmp.<key>.* — call only while holding that key's lock.
void remove_stale_temps(const std::string& dir, const std::string& key);

struct Sidecar {
  std::string op, backend, key, status;  // status: "ok" | "failed"
  std::string artefact;                  // file name inside the entry dir
  long long artefact_size = 0;
  std::string artefact_sha256;
  double compile_seconds = 0;
  const Key* key_info = nullptr;
  std::string log;  // compile log path (failed entries)
};
void write_sidecar(const std::string& dir, const Sidecar& s);
// Reads one top-level string or number field of a sidecar we wrote; "" when absent.
std::string sidecar_field(const std::string& meta_path, const std::string& field);

constexpr const char* kSidecar = "meta.json";
constexpr const char* kLog = "compile.log";

// The cache administration behind opforge/loader.h's list_cache_items / remove_cache_item.
using CacheItem = ::opf::CacheItem;
std::vector<CacheItem> list_cache(const std::string& root);
bool remove_cache_item(const CacheItem& item);

}  // namespace opf::detail::jit
