#include "core/cpu_jit.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string_view>

#include "build_config.h"
#include "common/sha256.h"
#include "core/jit_cache.h"
#include "opforge/build_info.h"
#include "opforge/error.h"

extern char** environ;

namespace opf::detail::cpu_jit {
namespace fs = std::filesystem;

namespace {

constexpr const char* kMagic = "opforge-cpu-jit-pch 1";

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

std::string read_text(const std::string& path, bool* ok) {
  std::ifstream in(path, std::ios::binary);
  *ok = bool(in);
  std::ostringstream ss;
  if (in) ss << in.rdbuf();
  return ss.str();
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r"), b = s.find_last_not_of(" \t\r");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::string without_blanks(const std::string& s) {
  std::string o;
  for (char c : s)
    if (c != ' ' && c != '\t' && c != '\r') o += c;
  return o;
}

// What identifies a file's current version without reading it.
struct Stat {
  long long size = -1, mtime_ns = -1, ctime_ns = -1;
  unsigned long long dev = 0, ino = 0;
  bool operator==(const Stat&) const = default;
};

bool stat_file(const std::string& path, Stat* s) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  s->size = (long long)st.st_size;
  s->mtime_ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
  s->ctime_ns = (long long)st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec;
  s->dev = st.st_dev;
  s->ino = st.st_ino;
  return true;
}

// SHA-256 of a file whose stat no longer matches the manifest, remembered per file version: a
// touched header costs one hash per process, not one per cache-key computation.
std::string sha256_memo(const std::string& path, const Stat& st) {
  static std::mutex mu;
  static std::map<std::string, std::pair<Stat, std::string>> memo;
  {
    std::lock_guard lock(mu);
    if (auto it = memo.find(path); it != memo.end() && it->second.first == st) return it->second.second;
  }
  std::string h;
  try {
    h = hash::sha256_file(path);
  } catch (const Error&) {
    return "";
  }
  std::lock_guard lock(mu);
  memo[path] = {st, h};
  return h;
}

// The file still has the content the manifest recorded.
bool unchanged(const std::string& path, long long size, long long mtime_ns, const std::string& sha) {
  Stat st;
  if (!stat_file(path, &st) || st.size != size) return false;
  if (st.mtime_ns == mtime_ns) return true;
  return sha256_memo(path, st) == sha;
}

struct Manifest {
  std::vector<std::string> command;
  std::string compiler_binary, header_sha256, identity;
  std::vector<std::string> includes;  // what the header #includes, as written
  struct File {
    long long size = 0, mtime_ns = 0;
    std::string sha256, path;
  };
  File gch;
  std::vector<File> deps;
};

// Line-oriented: "<field> <value>" where a value runs to the end of the line; files are
// "<size> <mtime_ns> <sha256> <path>". (Parsed on the first key computation of every process.)
bool parse_manifest(const std::string& text, Manifest* m, std::string* why) {
  size_t pos = 0;
  auto next_line = [&](std::string_view* line) {
    if (pos >= text.size()) return false;
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    *line = std::string_view(text).substr(pos, end - pos);
    pos = end + 1;
    return true;
  };
  auto file = [](std::string_view v, Manifest::File* f) {
    char* end = nullptr;
    const std::string s(v);
    f->size = std::strtoll(s.c_str(), &end, 10);
    f->mtime_ns = std::strtoll(end, &end, 10);
    const char* p = end;
    while (*p == ' ') ++p;
    const char* q = std::strchr(p, ' ');
    if (!q) return false;
    f->sha256.assign(p, q);
    f->path = q + 1;
    return f->sha256.size() == 64 && !f->path.empty();
  };
  std::string_view line;
  if (!next_line(&line) || line != kMagic) {
    *why = "not a manifest of this opforge (first line '" + std::string(line.substr(0, 40)) + "')";
    return false;
  }
  while (next_line(&line)) {
    const size_t sp = line.find(' ');
    const std::string_view field = line.substr(0, sp), value = sp == std::string_view::npos ? "" : line.substr(sp + 1);
    if (field == "arg") m->command.emplace_back(value);
    else if (field == "compiler-binary") m->compiler_binary = value;
    else if (field == "header-sha256") m->header_sha256 = value;
    else if (field == "include") m->includes.emplace_back(value);
    else if (field == "identity") m->identity = value;
    else if (field == "gch") {
      if (!file(value, &m->gch)) {
        *why = "bad gch line";
        return false;
      }
    } else if (field == "dep") {
      Manifest::File f;
      if (!file(value, &f)) {
        *why = "bad dep line";
        return false;
      }
      m->deps.push_back(std::move(f));
    }
  }
  if (m->identity.empty() || m->command.empty() || m->header_sha256.empty() || m->gch.sha256.empty()) {
    *why = "incomplete manifest";
    return false;
  }
  return true;
}

// `#include "x"` / `#include <x>` -> x
std::string include_name(const std::string& line) {
  std::string t = trim(line);
  if (t.empty() || t[0] != '#') return "";
  t = trim(t.substr(1));
  if (t.rfind("include", 0) != 0) return "";
  t = trim(t.substr(7));
  if (t.size() < 2 || (t[0] != '"' && t[0] != '<')) return "";
  const size_t end = t.find(t[0] == '"' ? '"' : '>', 1);
  return end == std::string::npos ? "" : t.substr(1, end - 1);
}

// A GCC/ninja depfile: "target: dep dep \<newline> dep ..." with '\ ' for spaces.
std::vector<std::string> parse_depfile(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  bool target_done = false;
  auto flush = [&] {
    if (cur.empty()) return;
    if (target_done) out.push_back(cur);
    else if (cur.back() == ':') target_done = true;
    cur.clear();
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\' && i + 1 < text.size() && (text[i + 1] == '\n' || text[i + 1] == '\r')) {
      flush();
      ++i;
    } else if (c == '\\' && i + 1 < text.size() && (text[i + 1] == ' ' || text[i + 1] == '#')) {
      cur += text[++i];
    } else if (c == '$' && i + 1 < text.size() && text[i + 1] == '$') {
      cur += '$';
      ++i;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      flush();
    } else {
      cur += c;
    }
  }
  flush();
  return out;
}

std::string depfile_escape(const std::string& p) {
  std::string o;
  for (char c : p) {
    if (c == ' ' || c == '#' || c == '\\') o += '\\';
    if (c == '$') o += '$';
    o += c;
  }
  return o;
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw Error("cannot write " + tmp + ": " + std::strerror(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) throw Error("cannot write " + path + ": " + std::strerror(errno));
}

int run(const std::vector<std::string>& args) {
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (int rc = posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ); rc != 0)
    throw Error("cannot run compiler '" + args[0] + "': " + std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

std::vector<std::string> compiler(const build::Toolchain& toolchain) {
  std::vector<std::string> cmd = toolchain.command;
  while (!cmd.empty()) {
    std::string base = cmd.front().substr(cmd.front().rfind('/') + 1);
    if (base != "ccache" && base != "sccache") break;
    cmd.erase(cmd.begin());
  }
  if (cmd.empty()) cmd.push_back(toolchain.id == "clang" ? "clang++" : "c++");
  return cmd;
}

std::string resolve_program(const std::string& prog) {
  auto real = [](const std::string& p) -> std::string {
    std::error_code ec;
    auto r = fs::canonical(p, ec);
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

std::vector<std::string> base_command(bool fp_contract_off) {
  // Mirrors kernels/meson.build's shared_module() (checked against compile_commands.json):
  // same standard, optimisation, NDEBUG, visibility, and libhwy's pkg-config cflags
  // (HWY_SHARED_DEFINE: hwy's functions keep default visibility under -fvisibility=hidden).
  // Differs on purpose: -march=native with only the static Highway target (the JIT may target
  // the host; prebuilt modules dispatch at run time), and -ffp-contract=off where it changes
  // nothing (source_disables_fp_contract).
  std::vector<std::string> argv = compiler(build::cpu_jit_toolchain());
  for (const auto& f : meson_args()) argv.push_back(f);  // -std, -O, -g, -DNDEBUG, cpp_args
  for (const char* f : {"-D_FILE_OFFSET_BITS=64", "-fPIC", "-shared", "-march=native", "-fvisibility=hidden",
                        "-DHWY_SHARED_DEFINE", "-DHWY_COMPILE_ONLY_STATIC=1", "-DOPF_JIT=1"})
    argv.push_back(f);
  if (fp_contract_off) argv.push_back("-ffp-contract=off");
  // Clang's runtime unrolling (loops of unknown trip count, so every SIMD row loop) is most of
  // its optimizer time in the big modules; an ab of clang against clang with it off found the
  // kernels' speed unchanged (README, `cpu_jit_cxx`). Off in the PCH too: same flags, same PCH.
  if (build::cpu_jit_toolchain().id == "clang")
    for (const char* f : {"-mllvm", "-unroll-runtime=false"}) argv.push_back(f);
  return argv;
}

bool source_disables_fp_contract(const std::string& path) {
  if (build::cpp_toolchain().id != "gcc") return false;
  bool ok = false;
  const std::string text = read_text(path, &ok);
  if (!ok) return false;
  // comments out, line continuations joined (enough C++ lexing for a file's leading directives)
  std::string code;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, 2, "//") == 0) {
      while (i < text.size() && text[i] != '\n') ++i;
      code += '\n';
    } else if (text.compare(i, 2, "/*") == 0) {
      const size_t end = text.find("*/", i + 2);
      if (end == std::string::npos) break;
      code += ' ';
      i = end + 1;
    } else if (text[i] == '"') {
      const size_t start = i;
      for (++i; i < text.size() && text[i] != '"' && text[i] != '\n'; ++i)
        if (text[i] == '\\') ++i;
      code += text.substr(start, i - start + 1);
    } else if (text[i] == '\\' && i + 1 < text.size() && text[i + 1] == '\n') {
      ++i;
    } else {
      code += text[i];
    }
  }
  // A stack of "this #if branch is taken by GCC, known without evaluating anything".
  std::vector<bool> taken;
  std::istringstream in(code);
  std::string line;
  while (std::getline(in, line)) {
    const std::string t = trim(line);
    if (t.empty()) continue;
    if (t[0] != '#') return false;  // a declaration before the pragma
    const std::string rest = trim(t.substr(1));
    size_t n = 0;
    while (n < rest.size() && (std::isalnum((unsigned char)rest[n]) || rest[n] == '_')) ++n;
    const std::string directive = rest.substr(0, n), args = without_blanks(rest.substr(n));
    if (directive == "include") return false;
    if (directive == "pragma" && args == "GCCoptimize(\"fp-contract=off\")")
      return std::all_of(taken.begin(), taken.end(), [](bool b) { return b; });
    if (directive == "ifdef" || directive == "ifndef") taken.push_back(false);
    else if (directive == "if")
      taken.push_back(args == "defined(__GNUC__)&&!defined(__clang__)" || args == "defined(__GNUC__)");
    else if (directive == "elif" || directive == "else") {
      if (!taken.empty()) taken.back() = false;
    } else if (directive == "endif") {
      if (!taken.empty()) taken.pop_back();
    }
    // #define, #undef, other pragmas: nothing declared
  }
  return false;
}

std::string pch_header_path() {
  if (const char* e = std::getenv("OPFORGE_JIT_PCH")) return std::string(e) == "0" ? "" : e;
  return build::jit_pch_header();
}

namespace {

// The bundle against its manifest: command, compiler, header, .gch and every recorded header.
PchCheck verify_bundle(const std::string& header, const std::vector<std::string>& base, Manifest* m) {
  PchCheck r;
  r.notable = true;  // a bundle exists; if it cannot be used, that is worth a warning
  const std::string where = header + ".manifest";
  bool ok = false;
  const std::string text = read_text(where, &ok);
  if (!ok) {
    r.why = where + " is missing (not built yet?)";
    r.notable = false;
    return r;
  }
  if (!parse_manifest(text, m, &r.why)) {
    r.why = where + ": " + r.why;
    return r;
  }
  if (m->command != base) {
    r.why = "it was built with another command line (" + where + ")";
    return r;
  }
  if (const std::string now = resolve_program(base.front()); now != m->compiler_binary) {
    r.why = "it was built by " + m->compiler_binary + ", the JIT runs " + now;
    return r;
  }
  try {
    if (hash::sha256_file(header) != m->header_sha256) {
      r.why = header + " changed since the PCH was built";
      return r;
    }
  } catch (const Error& e) {
    r.why = e.what();
    return r;
  }
  if (!unchanged(header + ".gch", m->gch.size, m->gch.mtime_ns, m->gch.sha256)) {
    r.why = header + ".gch is not the file the manifest describes";
    return r;
  }
  for (const auto& f : m->deps)
    if (!unchanged(f.path, f.size, f.mtime_ns, f.sha256)) {
      r.why = f.path + " changed since the PCH was built";
      return r;
    }
  r.usable = true;
  r.notable = false;
  r.header = header;
  r.identity = m->identity;
  return r;
}

}  // namespace

PchCheck find_pch(const std::vector<std::string>& base, const std::vector<std::string>& include_dirs, bool fresh) {
  const std::string header = pch_header_path();
  if (header.empty()) {
    PchCheck r;
    r.why = std::getenv("OPFORGE_JIT_PCH") ? "disabled by OPFORGE_JIT_PCH" : "this build makes none";
    return r;
  }
  // Verifying the ~400 recorded headers costs ~1 ms: a warm cache-key computation reuses this
  // process's last verdict while the bundle's own three files are unchanged (fresh = false).
  struct Memo {
    Stat manifest, header, gch;
    std::vector<std::string> base;
    PchCheck verdict;
    std::vector<std::string> includes;
  };
  static std::mutex mu;
  static std::map<std::string, Memo> memo;
  Memo now;
  stat_file(header + ".manifest", &now.manifest);
  stat_file(header, &now.header);
  stat_file(header + ".gch", &now.gch);
  now.base = base;
  PchCheck r;
  std::vector<std::string> includes;
  {
    std::lock_guard lock(mu);
    auto it = memo.find(header);
    if (!fresh && it != memo.end() && it->second.manifest == now.manifest && it->second.header == now.header &&
        it->second.gch == now.gch && it->second.base == base) {
      r = it->second.verdict;
      includes = it->second.includes;
    } else {
      Manifest m;
      r = verify_bundle(header, base, &m);
      includes = m.includes;
      now.verdict = r;
      now.includes = includes;
      memo[header] = std::move(now);
    }
  }
  if (!r.usable) return r;
  for (const auto& name : includes)
    for (const auto& dir : include_dirs) {
      struct stat st;
      if (::stat((dir + "/" + name).c_str(), &st) == 0) {
        r.usable = false;
        r.why = dir + " has its own " + name;  // correct as it is, just not this PCH's
        return r;
      }
    }
  return r;
}

void build_pch(const std::string& header_in, const std::string& header_out, const std::string& depfile,
               const std::string& dep_target) {
  const std::string out = fs::absolute(header_out).lexically_normal().string();
  const std::string manifest = out + ".manifest", gch = out + ".gch";
  // No manifest, no use: until a new one is complete, the loader compiles without the PCH.
  ::unlink(manifest.c_str());

  bool ok = false;
  const std::string text = read_text(header_in, &ok);
  if (!ok) throw Error("cannot read " + header_in + ": " + std::strerror(errno));
  write_file_atomically(out, text);

  const std::vector<std::string> base = base_command(true);
  const bool clang = build::cpu_jit_toolchain().id == "clang";
  for (const auto& a : base)
    if (a.find('\n') != std::string::npos) throw Error("a JIT compiler argument contains a newline: " + a);
  const std::string gch_tmp = gch + ".tmp", dep_tmp = out + ".d.tmp";
  std::vector<std::string> argv = base;
  for (const char* a : {"-x", "c++-header"}) argv.push_back(a);
  if (clang) {
    // templates the header instantiates, compiled once here rather than in every module; no
    // mtimes in the PCH: the manifest checks content (a touched, unchanged header stays usable)
    for (const char* a : {"-fpch-instantiate-templates", "-Xclang", "-fno-pch-timestamp",
                          "-Wno-unused-command-line-argument"})  // -shared, -fPIC: the module's flags
      argv.push_back(a);
  }
  for (const auto& a : {out, std::string("-o"), gch_tmp, std::string("-MD"), std::string("-MF"), dep_tmp})
    argv.push_back(a);
  if (const int rc = run(argv); rc != 0) {
    ::unlink(gch_tmp.c_str());
    std::string cmd;
    for (const auto& a : argv) cmd += a + ' ';
    throw Error("compiling the JIT precompiled header failed (status " + std::to_string(rc) + "): " + cmd);
  }
  const std::string dep_text = read_text(dep_tmp, &ok);
  ::unlink(dep_tmp.c_str());
  if (!ok) throw Error("the compiler wrote no depfile " + dep_tmp);
  if (::rename(gch_tmp.c_str(), gch.c_str()) != 0) throw Error("cannot write " + gch + ": " + std::strerror(errno));

  // Identity: what the PCH is a function of (never the .gch bytes: GCC's are not reproducible).
  // The build flags clang adds above are implied by the compiler named in it.
  std::string m, id = std::string(kMagic) + "\n";
  m += std::string(kMagic) + "\n";
  for (const auto& a : base) {
    m += "arg " + a + "\n";
    id += "arg " + a + "\n";
  }
  const std::string cc = resolve_program(base.front());
  m += "compiler-binary " + cc + "\n";
  id += "compiler " + cc + " " + build::cpu_jit_toolchain().id + " " + build::cpu_jit_toolchain().version + "\n";
  const std::string header_sha = hash::sha256_hex(text);
  m += "header-sha256 " + header_sha + "\n";
  id += "header " + header_sha + "\n";
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line))
    if (const std::string name = include_name(line); !name.empty()) m += "include " + name + "\n";

  auto record = [](const std::string& field, const std::string& path) {
    Stat st;
    if (!stat_file(path, &st)) throw Error("cannot stat " + path);
    const std::string sha = hash::sha256_file(path);
    return std::make_pair(
        field + " " + std::to_string(st.size) + " " + std::to_string(st.mtime_ns) + " " + sha + " " + path + "\n", sha);
  };
  std::string ninja =
      depfile_escape(dep_target) + ": " + depfile_escape(fs::absolute(header_in).lexically_normal().string());
  std::map<std::string, int> seen;
  for (const auto& d : parse_depfile(dep_text)) {
    const std::string p = fs::weakly_canonical(d).string();
    if (p == fs::weakly_canonical(out).string() || seen[p]++) continue;  // the header: hashed above
    const auto [entry, sha] = record("dep", p);
    m += entry;
    id += "dep " + sha + " " + p + "\n";
    ninja += " \\\n " + depfile_escape(p);
  }
  m += record("gch", gch).first;
  m += "identity " + hash::sha256_hex(id) + "\n";
  write_file_atomically(depfile, ninja + "\n");
  write_file_atomically(manifest, m);  // last: the bundle is complete
}

}  // namespace opf::detail::cpu_jit
