#include "core/jit_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "common/json_escape.h"
#include "common/sha256.h"
#include "common/utc_time.h"
#include "opforge/build_info.h"
#include "opforge/error.h"

namespace opf::detail::jit {
namespace fs = std::filesystem;

namespace {

std::string errno_text(int e) { return std::strerror(e); }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read JIT source " + path + ": " + errno_text(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool is_file(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string host_name() {
  char h[256] = {0};
  if (::gethostname(h, sizeof h - 1) != 0) return "?";
  return h;
}

bool is_key(const std::string& s) {
  return s.size() == 32 && std::all_of(s.begin(), s.end(), [](char c) {
           return std::isxdigit((unsigned char)c) && !std::isupper((unsigned char)c);
         });
}

bool is_name(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::islower((unsigned char)c) || std::isdigit((unsigned char)c) || c == '_';
  });
}

long long tree_bytes(const fs::path& p) {
  std::error_code ec;
  long long n = 0;
  if (fs::is_regular_file(p, ec)) return (long long)fs::file_size(p, ec);
  for (auto it = fs::recursive_directory_iterator(p, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file(ec)) n += (long long)it->file_size(ec);
  return n;
}

// `#include "name"` -> name; anything else (system <...> includes, other lines) -> "".
// (std::regex made the warm path of a cached load ~8 ms; this is ~100x faster.)
std::string quoted_include(const std::string& line) {
  size_t i = line.find_first_not_of(" \t");
  if (i == std::string::npos || line[i] != '#') return "";
  i = line.find_first_not_of(" \t", i + 1);
  if (i == std::string::npos || line.compare(i, 7, "include") != 0) return "";
  i = line.find_first_not_of(" \t", i + 7);
  if (i == std::string::npos || line[i] != '"') return "";
  const size_t end = line.find('"', i + 1);
  return end == std::string::npos ? "" : line.substr(i + 1, end - i - 1);
}

}  // namespace

std::vector<std::string> local_sources(const JitSource& src) {
  std::vector<std::string> order{fs::weakly_canonical(src.main_file).string()};
  std::set<std::string> seen{order.front()};
  for (size_t i = 0; i < order.size(); ++i) {
    std::istringstream text(read_file(order[i]));
    const std::string here = fs::path(order[i]).parent_path().string();
    std::string line;
    while (std::getline(text, line)) {
      const std::string name = quoted_include(line);
      if (name.empty()) continue;
      std::vector<std::string> dirs{here};
      dirs.insert(dirs.end(), src.include_dirs.begin(), src.include_dirs.end());
      for (const auto& d : dirs) {
        std::string cand = d + "/" + name;
        if (!is_file(cand)) continue;
        cand = fs::weakly_canonical(cand).string();
        if (seen.insert(cand).second) order.push_back(cand);
        break;
      }
    }
  }
  std::sort(order.begin() + 1, order.end());
  return order;
}

Key compute_key(const OpInfo& op, const Backend& backend, const JitSource& src) {
  Key k;
  k.inputs.push_back("opforge=" + build::version());
  k.inputs.push_back("abi=" + std::to_string(OPF_ABI_VERSION));
  k.inputs.push_back("op=" + op.name);
  k.inputs.push_back("backend=" + backend.name());
  for (const auto& d : src.defines) k.inputs.push_back("define=" + d);  // tuning values
  for (auto& s : backend.jit_identity(op, src)) k.inputs.push_back(std::move(s));
  for (const auto& path : local_sources(src)) k.sources.emplace_back(path, hash::sha256_hex(read_file(path)));
  std::string all;
  for (const auto& s : k.inputs) all += "input\x1f" + s + "\n";
  for (const auto& [p, h] : k.sources) all += "source\x1f" + p + "\x1f" + h + "\n";
  k.key = hash::sha256_hex(all).substr(0, 32);
  return k;
}

// ------------------------------------------------------------------------------------ lock

double lock_timeout_seconds() {
  const char* v = std::getenv("OPFORGE_LOCK_TIMEOUT");
  if (!v || !*v) return 300;
  char* end = nullptr;
  double t = std::strtod(v, &end);
  if (end == v || *end || !(t >= 0) || !std::isfinite(t))
    throw Error(std::string("OPFORGE_LOCK_TIMEOUT='") + v + "' is not a number of seconds");
  return t;
}

namespace {
// "pid N on HOST since TIME" as the holder wrote it into the lock file, on one line.
std::string read_holder(int fd) {
  char holder[256] = {0};
  ssize_t n = ::pread(fd, holder, sizeof holder - 1, 0);
  std::string h = n > 0 ? std::string(holder, size_t(n)) : "unknown holder";
  while (!h.empty() && (h.back() == '\n' || h.back() == ' ')) h.pop_back();
  std::replace(h.begin(), h.end(), '\n', ' ');
  return h;
}
}  // namespace

KeyLock::KeyLock(const std::string& path, double timeout_s, bool* waited,
                 const std::function<void(const std::string& holder)>& on_first_wait) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw Error("cannot open JIT lock " + path + ": " + errno_text(errno) +
                " (is the cache directory writable? set OPFORGE_CACHE_DIR)");
  if (waited) *waited = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  auto pause = std::chrono::milliseconds(5);
  bool announced = false;
  while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      int e = errno;
      ::close(fd_);
      throw Error("cannot lock JIT lock " + path + ": " + errno_text(e));
    }
    if (!announced) {
      announced = true;
      if (waited) *waited = true;
      if (on_first_wait) on_first_wait(read_holder(fd_));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      const std::string h = read_holder(fd_);
      ::close(fd_);
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", timeout_s);
      throw Error("timed out after " + std::string(secs) + " s waiting for JIT lock " + path + " held by " + h +
                  " (raise OPFORGE_LOCK_TIMEOUT, or wait for that process)");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
  // Tell the next waiter who holds it.
  const std::string me =
      "pid " + std::to_string(::getpid()) + " on " + host_name() + " since " + utc_timestamp() + "\n";
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, me.data(), me.size(), 0);
}

KeyLock::~KeyLock() {
  if (fd_ >= 0) {
    (void)!::ftruncate(fd_, 0);
    ::close(fd_);  // releases the flock
  }
}

bool KeyLock::is_free(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT;
  bool free = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  ::close(fd);
  return free;
}

// ------------------------------------------------------------------------------------ entries

std::string sidecar_field(const std::string& meta_path, const std::string& field) {
  std::ifstream in(meta_path);
  std::string line, needle = "  \"" + field + "\": ";
  while (std::getline(in, line)) {
    if (line.rfind(needle, 0) != 0) continue;
    std::string v = line.substr(needle.size());
    if (!v.empty() && v.back() == ',') v.pop_back();
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
    return v;
  }
  return "";
}

EntryCheck check_entry(const std::string& dir, const std::string& artefact_name) {
  EntryCheck c;
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return c;
  c.exists = true;
  const std::string meta = dir + "/" + kSidecar, art = dir + "/" + artefact_name;
  if (!is_file(meta)) {
    c.problem = "no " + std::string(kSidecar) + " sidecar";
    return c;
  }
  const std::string size = sidecar_field(meta, "artefact_size"), sum = sidecar_field(meta, "artefact_sha256");
  if (sidecar_field(meta, "status") != "ok" || size.empty() || sum.empty()) {
    c.problem = "sidecar " + meta + " is incomplete";
    return c;
  }
  if (::stat(art.c_str(), &st) != 0) {
    c.problem = art + " is missing";
    return c;
  }
  if (std::to_string((long long)st.st_size) != size) {
    c.problem = art + " has " + std::to_string((long long)st.st_size) + " bytes, sidecar says " + size;
    return c;
  }
  if (hash::sha256_file(art) != sum) {
    c.problem = art + " does not match the SHA-256 recorded in its sidecar";
    return c;
  }
  c.valid = true;
  return c;
}

void make_dirs(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw Error("cannot create JIT cache directory " + dir + ": " + ec.message() +
                " (set OPFORGE_CACHE_DIR to a writable directory)");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw Error("JIT cache directory " + dir + " is not writable: " + errno_text(errno) +
                " (set OPFORGE_CACHE_DIR to a writable directory)");
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
}

void remove_stale_temps(const std::string& dir, const std::string& key) {
  std::error_code ec;
  const std::string prefix = ".tmp." + key + ".";
  std::vector<fs::path> stale;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
    if (it->path().filename().string().rfind(prefix, 0) == 0) stale.push_back(it->path());
  for (const auto& p : stale) remove_tree(p.string());
}

void write_sidecar(const std::string& dir, const Sidecar& s) {
  std::ostringstream o;
  o << "{\n";
  o << "  \"opforge_cache_entry\": 1,\n";
  o << "  \"opforge_version\": " << json::quoted(build::version()) << ",\n";
  o << "  \"op\": " << json::quoted(s.op) << ",\n";
  o << "  \"backend\": " << json::quoted(s.backend) << ",\n";
  o << "  \"key\": " << json::quoted(s.key) << ",\n";
  o << "  \"status\": " << json::quoted(s.status) << ",\n";
  o << "  \"artefact\": " << json::quoted(s.artefact) << ",\n";
  o << "  \"artefact_size\": " << s.artefact_size << ",\n";
  o << "  \"artefact_sha256\": " << json::quoted(s.artefact_sha256) << ",\n";
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.3f", s.compile_seconds);
  o << "  \"compile_seconds\": " << secs << ",\n";
  o << "  \"log\": " << json::quoted(s.log) << ",\n";
  o << "  \"created\": \"" << utc_timestamp() << "\",\n";
  o << "  \"builder\": " << json::quoted("pid " + std::to_string(::getpid()) + " on " + host_name()) << ",\n";
  o << "  \"key_inputs\": [";
  if (s.key_info)
    for (size_t i = 0; i < s.key_info->inputs.size(); ++i) o << (i ? ", " : "") << json::quoted(s.key_info->inputs[i]);
  o << "],\n  \"sources\": {";
  if (s.key_info)
    for (size_t i = 0; i < s.key_info->sources.size(); ++i)
      o << (i ? ", " : "") << json::quoted(s.key_info->sources[i].first) << ": \"" << s.key_info->sources[i].second
        << '"';
  o << "}\n}\n";
  const std::string path = dir + "/" + kSidecar, tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << o.str();
    out.flush();
    if (!out) throw Error("cannot write JIT sidecar " + tmp + ": " + errno_text(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    throw Error("cannot write JIT sidecar " + path + ": " + errno_text(errno));
}

// ------------------------------------------------------------------------------------ listing

std::vector<CacheItem> list_cache(const std::string& root) {
  std::vector<CacheItem> items;
  std::error_code ec;
  auto sorted_dir = [&](const fs::path& p) {
    std::vector<fs::directory_entry> v;
    for (auto it = fs::directory_iterator(p, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
      v.push_back(*it);
    ec.clear();
    std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.path() < b.path(); });
    return v;
  };
  for (const auto& opd : sorted_dir(root)) {
    const std::string op = opd.path().filename().string();
    if (!opd.is_directory(ec) || opd.is_symlink(ec) || !is_name(op)) continue;
    for (const auto& bd : sorted_dir(opd.path())) {
      const std::string backend = bd.path().filename().string();
      if (!bd.is_directory(ec) || bd.is_symlink(ec) || !is_name(backend)) continue;
      for (const auto& e : sorted_dir(bd.path())) {
        const std::string name = e.path().filename().string();
        const std::string base = bd.path().string() + "/";
        CacheItem item{e.path().string(), "", op, backend, 0};
        if (e.is_symlink(ec)) continue;
        const bool dir = e.is_directory(ec);
        auto has_our_sidecar = [&] {
          return sidecar_field(e.path().string() + "/" + kSidecar, "opforge_cache_entry") == "1";
        };
        if (dir && is_key(name) && has_our_sidecar()) {
          item.kind = "entry";
        } else if (dir && name.size() == 39 && name.ends_with(".failed") && is_key(name.substr(0, 32)) &&
                   has_our_sidecar()) {
          item.kind = "failed";
        } else if (dir && name.rfind(".tmp.", 0) == 0 && name.size() > 38 && is_key(name.substr(5, 32)) &&
                   name[37] == '.' && std::all_of(name.begin() + 38, name.end(), ::isdigit)) {
          // a build in progress holds its key's lock; only an abandoned one is listed
          if (!KeyLock::is_free(base + name.substr(5, 32) + ".lock")) continue;
          item.kind = "temp";
        } else if (!dir && name.size() == 37 && name.ends_with(".lock") && is_key(name.substr(0, 32))) {
          if (!KeyLock::is_free(e.path().string())) continue;
          item.kind = "lock";
        } else {
          continue;  // not ours: never listed, never removed
        }
        item.bytes = tree_bytes(e.path());
        items.push_back(std::move(item));
      }
    }
  }
  return items;
}

bool remove_cache_item(const CacheItem& item) {
  std::error_code ec;
  if (item.kind == "lock") {
    if (!KeyLock::is_free(item.path)) return false;
    fs::remove(item.path, ec);
  } else {
    fs::remove_all(item.path, ec);
  }
  if (ec) return false;
  // rmdir only succeeds on empty directories: a user's file keeps them
  const fs::path backend_dir = fs::path(item.path).parent_path();
  if (::rmdir(backend_dir.c_str()) == 0) ::rmdir(backend_dir.parent_path().c_str());
  return true;
}

}  // namespace opf::detail::jit
