// JIT cache behaviour (issue 2, item 8), observed through LoaderStats and separate processes.
//
// Every test uses its own temporary cache dir and forces the JIT (OPFORGE_FORCE_JIT=1) so it
// runs the same in mode=prebuilt, jit and both. Tests that compile use a synthetic module in a
// temporary source tree (OPFORGE_SOURCE_DIR): a real opforge module (the loader validates it)
// whose run() returns a value from a local header, so a test can tell which text was compiled,
// and which compiles in ~0.2 s. The key tests also hash a copy of the real op sources, and the
// precompiled-header tests compile them.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/cpu_jit.h"
#include "core/jit_cache.h"
#include "opforge/build_info.h"
#include "opforge/error.h"
#include "opforge/loader.h"

extern char** environ;

namespace opf {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const fs::path& p, const std::string& s) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary | std::ios::trunc) << s;
}

// A fresh directory per test; the environment the loader reads is pointed into it.
class JitTest : public ::testing::Test {
 protected:
  fs::path tmp, cache, src;
  const OpInfo* op = nullptr;

  void SetUp() override {
    for (const auto& o : op_table())
      if (o.has_backend("cpu")) {
        op = &o;
        break;
      }
    if (!op) GTEST_SKIP() << "no op with a cpu backend is enabled in this build";
    char tmpl[] = "/tmp/opforge-jit-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    tmp = tmpl;
    cache = tmp / "cache";
    src = tmp / "src";
    ::setenv("OPFORGE_CACHE_DIR", cache.c_str(), 1);
    ::setenv("OPFORGE_SOURCE_DIR", src.c_str(), 1);
    ::setenv("OPFORGE_FORCE_JIT", "1", 1);
    // whole modules, compiled at load: the cache's mechanics, which per-pair modules share
    // (jit_specialize_test.cpp covers those)
    ::setenv("OPFORGE_JIT_SPECIALIZE", "0", 1);
    ::unsetenv("OPFORGE_LOCK_TIMEOUT");
    Loader::instance().forget();
  }
  void TearDown() override {
    if (!tmp.empty()) fs::remove_all(tmp);
    ::unsetenv("OPFORGE_JIT_SPECIALIZE");
    Loader::instance().forget();
  }

  fs::path op_dir() const { return src / "kernels" / "ops" / op->name; }
  fs::path cache_dir() const { return cache / op->name / "cpu"; }

  // The synthetic module: returns OPF_TEST_VALUE (from a local header); `spin` adds that many
  // squared constexpr iterations of compile time; `broken` makes it fail to compile.
  void make_tree(int value, int spin = 0, bool broken = false, unsigned abi = OPF_ABI_VERSION) {
    fs::create_directories(src / "kernels");
    if (!fs::exists(src / "kernels" / "include"))
      fs::copy(build::source_root() + "/kernels/include", src / "kernels" / "include", fs::copy_options::recursive);
    set_value(value);
    std::string s = "#include \"opforge/module.h\"\n#include \"test_value.h\"\n";
    if (spin)
      s += "constexpr long spin() { long x = 0; for (int i = 0; i < " + std::to_string(spin) +
           "; ++i) for (int j = 0; j < " + std::to_string(spin) +
           "; ++j) x += (i ^ j) % 7; return x; }\nstatic_assert(spin() > 0);\n";
    if (broken) s += "this is not C++;\n";
    // run() returns the value itself (not the ABI's 0/1), so tests can tell builds apart
    s += "extern \"C\" OPF_EXPORT const opf_module_info* opf_module(void) {\n"
         "  static const opf_module_info info{" +
         std::to_string(abi) + "u, \"" + op->name +
         "\", \"cpu\", \"test\",\n"
         "      [](const opf_module_info*, const opf_call*, char*, size_t) { return OPF_TEST_VALUE; }, nullptr, "
         "nullptr};\n"
         "  return &info;\n}\n";
    write_text(op_dir() / "cpu.cpp", s);
  }
  void set_value(int value) {
    write_text(op_dir() / "test_value.h", "#pragma once\n#define OPF_TEST_VALUE " + std::to_string(value) + "\n");
  }

  std::string key() { return Loader::instance().cache_state(*op, "cpu").key; }
};

// ----------------------------------------------------------------------------- child processes

struct Child {
  pid_t pid = -1;
  fs::path out, err;
  int status = -1;
  std::string stdout_text, stderr_text;
  std::map<std::string, std::string> fields;  // parsed key=value from stdout

  void wait() {
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    stdout_text = read_text(out);
    stderr_text = read_text(err);
    std::istringstream in(stdout_text);
    std::string tok;
    while (in >> tok)
      if (auto eq = tok.find('='); eq != std::string::npos) fields[tok.substr(0, eq)] = tok.substr(eq + 1);
  }
  bool ok() const { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }
  int num(const std::string& k) const { return fields.count(k) ? std::stoi(fields.at(k)) : -1; }
};

Child spawn_helper(const fs::path& dir, const std::string& tag, const std::string& op, bool run = true,
                   bool own_group = false) {
  const char* helper = std::getenv("OPFORGE_JIT_HELPER");
  if (!helper) throw Error("OPFORGE_JIT_HELPER is not set (meson test sets it)");
  Child c;
  c.out = dir / (tag + ".out");
  c.err = dir / (tag + ".err");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, c.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, c.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  if (own_group) {
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
  }
  std::vector<std::string> args{helper, op, "cpu"};
  if (run) args.push_back("--run");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int rc = posix_spawn(&c.pid, helper, &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) throw Error(std::string("cannot start ") + helper + ": " + std::strerror(rc));
  return c;
}

// Polls until pred() holds; false on timeout.
template <class F>
bool eventually(F pred, std::chrono::milliseconds limit = 20s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return pred();
}

// The helper has tried the lock and found it taken: with OPFORGE_JIT_VERBOSE=1 the loader says so
// on stderr before its first sleep. (Having the lock file open is not enough: a process released
// between its open() and its first flock() takes the lock without waiting.)
bool reported_waiting(const Child& c) { return read_text(c.err).find("waiting for JIT lock") != std::string::npos; }

// ----------------------------------------------------------------------------- tests

TEST_F(JitTest, SecondLoadIsACacheHitInProcessAndAcrossProcesses) {
  make_tree(42);
  auto& L = Loader::instance();
  const LoaderStats s0 = L.stats();
  const LoadedModule first = L.load(*op, "cpu");
  EXPECT_EQ(first.source, ModuleSource::jit_compiled);
  EXPECT_EQ(L.stats().compiles, s0.compiles + 1);
  EXPECT_EQ(first.path, (cache_dir() / first.cache_key / "module.so").string());
  EXPECT_TRUE(fs::exists(cache_dir() / first.cache_key / "meta.json"));
  EXPECT_FALSE(fs::exists(cache_dir() / (".tmp." + first.cache_key + "." + std::to_string(::getpid()))));
  opf_call call{"forward", nullptr, 0, nullptr, 0, nullptr, nullptr};
  char err[64];
  EXPECT_EQ(first.info->run(first.info, &call, err, sizeof err), 42);
  std::printf("cold JIT compile of the synthetic module: %.3f s\n", first.load_seconds);

  L.forget();
  const LoadedModule second = L.load(*op, "cpu");
  EXPECT_EQ(second.source, ModuleSource::jit_cache);
  EXPECT_EQ(second.path, first.path);
  EXPECT_EQ(L.stats().compiles, s0.compiles + 1) << "the second load ran the compiler";
  EXPECT_EQ(L.stats().cache_hits, s0.cache_hits + 1);
  std::printf("warm cached load (key + checksum + dlopen): %.6f s\n", second.load_seconds);

  Child c = spawn_helper(tmp, "other", op->name);
  c.wait();
  ASSERT_TRUE(c.ok()) << c.stderr_text;
  EXPECT_EQ(c.num("compiles"), 0) << c.stdout_text;
  EXPECT_EQ(c.num("hits"), 1) << c.stdout_text;
  EXPECT_EQ(c.fields["source"], "jit-cache");
  EXPECT_EQ(c.fields["path"], first.path);
  EXPECT_EQ(c.num("run"), 42);
}

TEST_F(JitTest, EditingAnIncludedLocalHeaderChangesTheKey) {
  // The real op sources, copied: hashing must follow their local includes.
  fs::create_directories(src);
  fs::copy(build::source_root() + "/kernels", src / "kernels", fs::copy_options::recursive);
  const std::string k0 = key();
  ASSERT_EQ(k0.size(), 32u);
  EXPECT_EQ(key(), k0) << "the key is not deterministic";

  detail::JitSource js;
  js.main_file = (op_dir() / "cpu.cpp").string();
  js.include_dirs = {(src / "kernels" / "include").string(), (src / "kernels").string()};
  const auto sources = detail::jit::local_sources(js);
  const fs::path module_h = fs::weakly_canonical(src / "kernels" / "include" / "opforge" / "module.h");
  ASSERT_NE(std::find(sources.begin(), sources.end(), module_h.string()), sources.end())
      << "every CPU module includes opforge/module.h; the include scan did not find it";

  // mtime alone never changes the key
  fs::last_write_time(module_h, fs::file_time_type::clock::now() + 1h);
  EXPECT_EQ(key(), k0) << "touching a header changed the key (mtime must not be hashed)";
  // a header nobody includes does not either
  write_text(src / "kernels" / "include" / "opforge" / "not_included.h", "#pragma once\nint unrelated;\n");
  EXPECT_EQ(key(), k0);

  // every header the op really includes does
  for (size_t i = 1; i < sources.size(); ++i) {
    const std::string before = read_text(sources[i]);
    write_text(sources[i], before + "\n// edited\n");
    EXPECT_NE(key(), k0) << "editing " << sources[i] << " did not change the key";
    write_text(sources[i], before);
    EXPECT_EQ(key(), k0) << "restoring " << sources[i] << " did not restore the key";
  }

  if (!op->tune.empty()) {  // tuning values are part of the key
    std::string env = "OPFORGE_TUNE_" + op->name + "_" + op->tune.front().first;
    for (auto& ch : env) ch = char(std::toupper((unsigned char)ch));
    ::setenv(env.c_str(), "7", 1);
    EXPECT_NE(key(), k0) << env << " did not change the key";
    ::unsetenv(env.c_str());
  }
}

TEST_F(JitTest, EditedHeaderIsRecompiledAndTheNewTextRuns) {
  make_tree(1);
  Child a = spawn_helper(tmp, "a", op->name);
  a.wait();
  ASSERT_TRUE(a.ok()) << a.stderr_text;
  EXPECT_EQ(a.num("compiles"), 1);
  EXPECT_EQ(a.num("run"), 1);
  set_value(2);  // only the local header changes
  Child b = spawn_helper(tmp, "b", op->name);
  b.wait();
  ASSERT_TRUE(b.ok()) << b.stderr_text;
  EXPECT_EQ(b.num("compiles"), 1) << "an edited header must not hit the old entry";
  EXPECT_EQ(b.num("run"), 2);
  EXPECT_NE(a.fields["path"], b.fields["path"]);
}

TEST_F(JitTest, EightRacingProcessesCompileOnceAndAllLoadIt) {
  make_tree(8);
  const std::string k = key();
  fs::create_directories(cache_dir());
  const fs::path lock = cache_dir() / (k + ".lock");
  std::vector<Child> kids;
  {
    // Start line: hold the key's lock until all 8 are queued on it, so all of them race for it
    // at once however slowly this machine starts processes.
    detail::jit::KeyLock start(lock.string(), 1, nullptr);
    ::setenv("OPFORGE_JIT_VERBOSE", "1", 1);
    for (int i = 0; i < 8; ++i) kids.push_back(spawn_helper(tmp, "racer" + std::to_string(i), op->name));
    ::unsetenv("OPFORGE_JIT_VERBOSE");
    ASSERT_TRUE(eventually([&] {
      for (const auto& kid : kids)
        if (!reported_waiting(kid)) return false;
      return true;
    })) << "not every racer reached the lock";
  }
  int compiles = 0, hits = 0, waits = 0;
  for (auto& k : kids) {
    k.wait();
    ASSERT_TRUE(k.ok()) << k.stderr_text;
    compiles += k.num("compiles");
    hits += k.num("hits");
    waits += k.num("waits");
    EXPECT_EQ(k.num("run"), 8);
    EXPECT_EQ(k.fields["path"], kids.front().fields["path"]);
  }
  std::printf("8 racers: %d compile(s), %d cache hits, %d lock waits\n", compiles, hits, waits);
  EXPECT_EQ(compiles, 1);
  EXPECT_EQ(hits, 7);
  EXPECT_EQ(waits, 8) << "every racer found the lock taken, so each must count one lock wait";
}

TEST_F(JitTest, BuilderKilledWithSigkillLeavesNoStaleLock) {
  make_tree(9, 600);  // ~0.7 s of compile, so the kill lands mid-compile
  const std::string k = key();
  const fs::path lock = cache_dir() / (k + ".lock");
  Child c = spawn_helper(tmp, "victim", op->name, true, /*own_group=*/true);
  const fs::path tmpdir = cache_dir() / (".tmp." + k + "." + std::to_string(c.pid));
  ASSERT_TRUE(eventually([&] { return fs::exists(tmpdir / "compile.log"); })) << "the builder never started compiling";
  // compile.log appears just before the compiler is spawned; between fork and exec the child
  // still shares the lock (O_CLOEXEC acts at exec), so let the compiler get going first.
  std::this_thread::sleep_for(150ms);
  ASSERT_EQ(::kill(c.pid, SIGKILL), 0);
  c.wait();
  ASSERT_TRUE(WIFSIGNALED(c.status));
  // The compiler child is still running (only its parent was killed): it must not hold the lock.
  const bool free_now = detail::jit::KeyLock::is_free(lock.string());
  const bool compiler_alive = ::kill(-c.pid, 0) == 0;
  EXPECT_TRUE(free_now) << "lock " << lock << " is still held after its owner died";
  if (!compiler_alive) std::printf("note: the compiler had already finished; lock inheritance not observed\n");
  ::kill(-c.pid, SIGKILL);  // now stop the orphaned compiler too
  EXPECT_FALSE(detail::jit::check_entry((cache_dir() / k).string(), "module.so").valid)
      << "killed too late: entry published";

  // until the next builder of this key comes, `opforge clean` reports the temp dir as stale
  bool listed = false;
  for (const auto& item : detail::jit::list_cache(cache.string()))
    listed |= item.kind == "temp" && item.path == tmpdir.string();
  EXPECT_TRUE(listed) << tmpdir << " not listed as a stale temp dir";

  ::setenv("OPFORGE_LOCK_TIMEOUT", "30", 1);
  auto& L = Loader::instance();
  const LoaderStats s0 = L.stats();
  const LoadedModule m = L.load(*op, "cpu");
  EXPECT_EQ(m.source, ModuleSource::jit_compiled);
  EXPECT_EQ(L.stats().compiles, s0.compiles + 1);
  EXPECT_EQ(L.stats().lock_waits, s0.lock_waits) << "the next load waited on a dead builder's lock";
  opf_call call{"forward", nullptr, 0, nullptr, 0, nullptr, nullptr};
  char err[64];
  EXPECT_EQ(m.info->run(m.info, &call, err, sizeof err), 9);
  EXPECT_FALSE(fs::exists(tmpdir)) << "the next builder left the dead builder's temp dir behind";
}

TEST_F(JitTest, LockTimeoutNamesTheLockAndItsHolder) {
  make_tree(3);
  const std::string k = key();
  fs::create_directories(cache_dir());
  const fs::path lock = cache_dir() / (k + ".lock");
  detail::jit::KeyLock held(lock.string(), 1, nullptr);  // this process plays the stuck builder
  ::setenv("OPFORGE_LOCK_TIMEOUT", "0.3", 1);
  Child c = spawn_helper(tmp, "waiter", op->name);
  c.wait();
  EXPECT_FALSE(c.ok());
  const std::string err = c.stderr_text;
  EXPECT_NE(err.find("timed out"), std::string::npos) << err;
  EXPECT_NE(err.find(lock.string()), std::string::npos) << "error does not name the lock: " << err;
  EXPECT_NE(err.find("pid " + std::to_string(::getpid())), std::string::npos)
      << "error does not name the holder: " << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << "not a one-line error: " << err;
}

TEST_F(JitTest, WaiterReportsTheBuildersFailureLog) {
  make_tree(4, 0, /*broken=*/true);
  const std::string k = key();
  fs::create_directories(cache_dir());
  const fs::path lock = cache_dir() / (k + ".lock");
  Child a, b;
  {
    // Hold the lock until both helpers are queued on it, so one builds and the other waits.
    detail::jit::KeyLock held(lock.string(), 1, nullptr);
    ::setenv("OPFORGE_JIT_VERBOSE", "1", 1);
    a = spawn_helper(tmp, "a", op->name);
    b = spawn_helper(tmp, "b", op->name);
    ::unsetenv("OPFORGE_JIT_VERBOSE");
    ASSERT_TRUE(eventually([&] { return reported_waiting(a) && reported_waiting(b); }));
  }
  a.wait();
  b.wait();
  EXPECT_FALSE(a.ok());
  EXPECT_FALSE(b.ok());
  const fs::path log = cache_dir() / (k + ".failed") / "compile.log";
  const std::string both = a.stderr_text + b.stderr_text;
  const size_t first = both.find("failed in another process");
  EXPECT_NE(first, std::string::npos) << "the waiter did not report the builder's failure: " << both;
  EXPECT_EQ(both.find("failed in another process", first + 1), std::string::npos) << "both failed as waiters: " << both;
  for (const Child* c : {&a, &b})
    EXPECT_NE(c->stderr_text.find(log.string()), std::string::npos) << "no log path in: " << c->stderr_text;
  EXPECT_NE(read_text(log).find("this is not C++"), std::string::npos) << "the log lacks the compiler's diagnostic";
}

TEST_F(JitTest, CorruptedCachedModuleIsDetectedAndRebuilt) {
  make_tree(5);
  // Built by another process: this one must not have the module mapped while the test damages
  // the file in place (that would SIGBUS this process, which is the failure being prevented).
  Child builder = spawn_helper(tmp, "builder", op->name);
  builder.wait();
  ASSERT_TRUE(builder.ok()) << builder.stderr_text;
  const fs::path so = builder.fields["path"];
  const std::string good = read_text(so);
  ASSERT_GT(good.size(), 1000u);

  // same size, one byte flipped: only the checksum can tell
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x5a;
  write_text(so, flipped);
  const auto check = detail::jit::check_entry(so.parent_path().string(), "module.so");
  EXPECT_FALSE(check.valid);
  EXPECT_NE(check.problem.find("SHA-256"), std::string::npos) << check.problem;

  // truncated (what a killed copy or full disk leaves): a fresh process must rebuild, not SIGBUS
  write_text(so, good.substr(0, good.size() / 3));
  Child c = spawn_helper(tmp, "after-truncation", op->name);
  c.wait();
  ASSERT_TRUE(c.ok()) << c.stderr_text;
  EXPECT_EQ(c.num("compiles"), 1);
  EXPECT_EQ(c.num("run"), 5);
  EXPECT_NE(c.stderr_text.find("corrupt"), std::string::npos) << "rebuild was silent: " << c.stderr_text;
  EXPECT_TRUE(detail::jit::check_entry(so.parent_path().string(), "module.so").valid);
}

TEST_F(JitTest, CompileErrorReportsTheCompilerLogPath) {
  make_tree(6, 0, /*broken=*/true);
  auto& L = Loader::instance();
  std::string msg;
  try {
    L.load(*op, "cpu");
    FAIL() << "a broken source loaded";
  } catch (const Error& e) {
    msg = e.what();
  }
  const fs::path log = cache_dir() / (key() + ".failed") / "compile.log";
  EXPECT_NE(msg.find(log.string()), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
  EXPECT_NE(read_text(log).find("error"), std::string::npos) << "log has no compiler diagnostic";
  EXPECT_FALSE(fs::exists(cache_dir() / key())) << "a failed build was published";
}

// A module built against ABI v1 (an old cache entry, a stale module dir) is refused by name.
TEST_F(JitTest, OldAbiModuleIsRefusedWithOneLineNamingIt) {
  make_tree(5, 0, false, /*abi=*/1);
  std::string msg;
  try {
    Loader::instance().load(*op, "cpu");
    FAIL() << "an ABI v1 module loaded";
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find((cache_dir() / key() / "module.so").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("ABI version 1, expected " + std::to_string(OPF_ABI_VERSION)), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
}

TEST_F(JitTest, UnwritableCacheDirGivesAClearError) {
  make_tree(7);
  auto& L = Loader::instance();
  auto expect_clear_error = [&](const fs::path& dir) {
    ::setenv("OPFORGE_CACHE_DIR", dir.c_str(), 1);
    L.forget();
    try {
      L.load(*op, "cpu");
      ADD_FAILURE() << "loaded with cache dir " << dir;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(dir.string()), std::string::npos) << "error does not name the directory: " << msg;
      EXPECT_NE(msg.find("OPFORGE_CACHE_DIR"), std::string::npos) << "error does not say how to fix it: " << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  };
  write_text(tmp / "a-file", "not a directory\n");
  expect_clear_error(tmp / "a-file" / "cache");  // a file where a directory must be
  if (::geteuid() != 0) {
    fs::create_directories(tmp / "ro");
    fs::permissions(tmp / "ro", fs::perms::owner_read | fs::perms::owner_exec);
    expect_clear_error(tmp / "ro");
    fs::permissions(tmp / "ro", fs::perms::owner_all);
  } else {
    std::printf("running as root: the read-only-directory variant is not observable, only the file-in-the-way one\n");
  }
}

TEST_F(JitTest, CleanListsAndRemovesOnlyOpforgeEntries) {
  make_tree(10);
  const LoadedModule m = Loader::instance().load(*op, "cpu");
  const fs::path entry = fs::path(m.path).parent_path();
  // things that are not ours, inside and beside the layout
  write_text(cache / "README.txt", "user file\n");
  write_text(cache_dir() / "notes.txt", "user file\n");
  write_text(cache_dir() / "0123456789abcdef0123456789abcdef" / "module.so", "no sidecar: not ours\n");
  fs::create_directories(cache_dir() / ".tmp.0123456789abcdef0123456789abcdef.1");  // abandoned build

  auto items = detail::jit::list_cache(cache.string());
  std::map<std::string, std::string> kinds;
  for (const auto& it : items) kinds[it.path] = it.kind;
  EXPECT_EQ(kinds[entry.string()], "entry");
  EXPECT_EQ(kinds[(cache_dir() / ".tmp.0123456789abcdef0123456789abcdef.1").string()], "temp");
  EXPECT_EQ(kinds.count((cache_dir() / "0123456789abcdef0123456789abcdef").string()), 0u);
  EXPECT_EQ(kinds.count((cache_dir() / "notes.txt").string()), 0u);

  for (const auto& it : items) detail::jit::remove_cache_item(it);
  EXPECT_FALSE(fs::exists(entry));
  EXPECT_FALSE(fs::exists(cache_dir() / ".tmp.0123456789abcdef0123456789abcdef.1"));
  EXPECT_TRUE(fs::exists(cache / "README.txt"));
  EXPECT_TRUE(fs::exists(cache_dir() / "notes.txt"));
  EXPECT_TRUE(fs::exists(cache_dir() / "0123456789abcdef0123456789abcdef" / "module.so"));
  EXPECT_TRUE(detail::jit::list_cache(cache.string()).empty());
}

// ----------------------------------------------------------------------------- precompiled header

TEST(JitSource, FpContractPragmaIsRecognisedOnlyWhereItCoversTheWholeFile) {
  char tmpl[] = "/tmp/opforge-jit-pragma-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const fs::path dir = tmpl;
  const bool gcc = build::cpp_toolchain().id == "gcc";
  auto check = [&](const std::string& text) {
    write_text(dir / "t.cpp", text);
    return detail::cpu_jit::source_disables_fp_contract((dir / "t.cpp").string());
  };
  const std::string pragma = "#pragma GCC optimize(\"fp-contract=off\")\n";
  const std::string guarded = "#if defined(__GNUC__) && !defined(__clang__)\n" + pragma + "#endif\n";
  EXPECT_EQ(check("// comment\n/* block\n comment */\n" + guarded + "#include <cmath>\n"), gcc);
  EXPECT_EQ(check("#ifndef X\n#define X 1\n#endif\n  # pragma  GCC optimize ( \"fp-contract=off\" )\nint x;\n"), gcc);
  EXPECT_FALSE(check("#include <cmath>\n" + pragma)) << "after an #include, some functions do not get it";
  EXPECT_FALSE(check("int x;\n" + pragma)) << "after a declaration";
  EXPECT_FALSE(check("#if 0\n" + pragma + "#endif\n")) << "in a branch GCC does not take";
  EXPECT_FALSE(check("#ifdef SOMETHING\n" + pragma + "#endif\n")) << "in a branch GCC may not take";
  EXPECT_FALSE(check("#if defined(__GNUC__)\n#else\n" + pragma + "#endif\n"));
  EXPECT_FALSE(check("#pragma GCC optimize(\"fp-contract=fast\")\n"));
  EXPECT_FALSE(check("int main() {}\n"));
  for (const auto& o : op_table()) {
    if (!o.has_backend("cpu")) continue;
    EXPECT_EQ(
        detail::cpu_jit::source_disables_fp_contract(build::source_root() + "/kernels/ops/" + o.name + "/cpu.cpp"), gcc)
        << o.name << "/cpu.cpp lost its leading fp-contract pragma: its JIT gets no precompiled header";
  }
  fs::remove_all(dir);
}

// The real op sources in the test's own tree (OPFORGE_SOURCE_DIR), as the PCH must serve any tree.
class JitPchTest : public JitTest {
 protected:
  std::string pch;  // this build's bundle: <pch>, <pch>.gch, <pch>.manifest

  void SetUp() override {
    JitTest::SetUp();
    if (IsSkipped()) return;
    ::unsetenv("OPFORGE_JIT_PCH");
    pch = detail::cpu_jit::pch_header_path();
    if (pch.empty()) GTEST_SKIP() << "this build makes no CPU JIT precompiled header (not GCC)";
    ASSERT_TRUE(fs::exists(pch + ".manifest")) << "ninja builds " << pch << " before the tests run";
    fs::create_directories(src);
    fs::copy(build::source_root() + "/kernels", src / "kernels", fs::copy_options::recursive);
  }
  void TearDown() override {
    ::unsetenv("OPFORGE_JIT_PCH");
    JitTest::TearDown();
  }
  static std::string log_of(const std::string& module_path) {
    return read_text(fs::path(module_path).parent_path() / "compile.log");
  }
  // the compiler's own output: the log's first line is the command
  static std::string diagnostics(const std::string& log) {
    const size_t nl = log.find('\n');
    return nl == std::string::npos ? "" : log.substr(nl + 1);
  }
};

TEST_F(JitPchTest, RealOpCompilesWithItToTheSameModuleAsWithout) {
  auto& L = Loader::instance();
  const LoadedModule with = L.load(*op, "cpu");
  ASSERT_EQ(with.source, ModuleSource::jit_compiled);
  const std::string log = log_of(with.path);
  EXPECT_NE(log.find(" -include " + pch + " "), std::string::npos) << log;
  EXPECT_NE(log.find(" -Winvalid-pch "), std::string::npos) << log;
  EXPECT_EQ(diagnostics(log).find("invalid-pch"), std::string::npos) << "GCC rejected the PCH: " << log;
  EXPECT_NE(read_text(fs::path(with.path).parent_path() / "meta.json").find("\"pch="), std::string::npos)
      << "the PCH's identity is not among the key inputs";

  ::setenv("OPFORGE_JIT_PCH", "0", 1);
  L.forget();
  const LoadedModule without = L.load(*op, "cpu");
  ASSERT_EQ(without.source, ModuleSource::jit_compiled);
  EXPECT_NE(without.cache_key, with.cache_key);
  EXPECT_EQ(log_of(without.path).find("-include"), std::string::npos);
  std::printf("cold JIT of %s: %.2f s with the precompiled header, %.2f s without\n", op->name.c_str(),
              with.load_seconds, without.load_seconds);
  // Same bytes: the PCH is a parse cache, not a semantic change (no -g: debug info names files).
  if (log.find(" -g ") == std::string::npos) {
    EXPECT_TRUE(read_text(with.path) == read_text(without.path)) << "the PCH changed the compiled module";
  }
}

TEST_F(JitPchTest, MissingOrStalePchIsNotUsedAndItsContentIsInTheKey) {
  const std::string k_pch = key();
  ::setenv("OPFORGE_JIT_PCH", "0", 1);
  const std::string k_none = key();
  EXPECT_NE(k_pch, k_none);
  ::setenv("OPFORGE_JIT_PCH", (tmp / "missing" / "opf_jit_pch.h").c_str(), 1);
  EXPECT_EQ(key(), k_none) << "a missing PCH changed the key";

  // A copy of the bundle (the ~90 MB .gch linked, not copied).
  const fs::path copy = tmp / "pch" / "opf_jit_pch.h";
  fs::create_directories(copy.parent_path());
  fs::copy_file(pch, copy);
  fs::copy_file(pch + ".manifest", copy.string() + ".manifest");
  fs::create_symlink(pch + ".gch", copy.string() + ".gch");
  ::setenv("OPFORGE_JIT_PCH", copy.c_str(), 1);
  const std::string k_copy = key();
  EXPECT_NE(k_copy, k_none) << "an intact copy of the bundle was not used";

  // The header edited after its .gch was built: stale, so unused, and the JIT still works.
  const std::string text = read_text(copy);
  write_text(copy, text + "#include <map>\n");
  EXPECT_EQ(key(), k_none) << "a stale PCH was used";
  Child c = spawn_helper(tmp, "stale", op->name, /*run=*/false);
  c.wait();
  ASSERT_TRUE(c.ok()) << c.stderr_text;
  EXPECT_EQ(c.fields["source"], "jit-compiled");
  EXPECT_EQ(log_of(c.fields["path"]).find("-include"), std::string::npos);
  EXPECT_NE(c.stderr_text.find("not using the CPU JIT's precompiled header"), std::string::npos) << c.stderr_text;
  EXPECT_NE(c.stderr_text.find(copy.string() + " changed"), std::string::npos) << c.stderr_text;

  // The same text again (a new mtime): content decides, so it is current again.
  write_text(copy, text);
  EXPECT_EQ(key(), k_copy);

  // Another .gch than the manifest describes.
  fs::remove(copy.string() + ".gch");
  write_text(copy.string() + ".gch", "not a precompiled header");
  EXPECT_EQ(key(), k_none) << "a .gch the manifest does not describe was used";

  // Rebuilt in place from an edited header: new content, new identity, new key (same path).
  const char* tool = std::getenv("OPFORGE_JIT_PCH_TOOL");
  ASSERT_NE(tool, nullptr) << "OPFORGE_JIT_PCH_TOOL is not set (meson test sets it)";
  write_text(tmp / "edited_pch.h", text + "#include <map>\n");
  std::vector<std::string> args{tool, (tmp / "edited_pch.h").string(), copy.string(), (tmp / "pch.d").string(), "pch"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, tool, nullptr, nullptr, argv.data(), environ), 0);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << tool << " failed";
  const std::string k_rebuilt = key();
  EXPECT_NE(k_rebuilt, k_copy) << "the PCH's content changed, the key did not";
  EXPECT_NE(k_rebuilt, k_none) << "the rebuilt PCH was not used";
}

TEST_F(JitPchTest, TreeWithItsOwnCopyOfAPchHeaderGetsNoPch) {
  // The op's #include "hwy/highway.h" would find this copy; the PCH's would hide it.
  write_text(src / "kernels" / "include" / "hwy" / "highway.h", "#pragma once\n");
  const std::string k = key();
  ::setenv("OPFORGE_JIT_PCH", "0", 1);
  EXPECT_EQ(key(), k);
}

}  // namespace
}  // namespace opf
