#include "matrix/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

extern char** environ;

namespace opf::proc {
namespace {
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::vector<std::string> merged_env(const std::vector<std::pair<std::string, std::string>>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string_view kv(*e);
    bool overridden = false;
    for (const auto& [k, v] : extra)
      if (kv.size() > k.size() && kv.substr(0, k.size()) == k && kv[k.size()] == '=') overridden = true;
    if (!overridden) env.emplace_back(kv);
  }
  for (const auto& [k, v] : extra) env.push_back(k + "=" + v);
  return env;
}

std::vector<char*> c_array(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Spawns argv in a new process group; stdout to out_fd (or log file), stderr too unless err_null.
pid_t spawn(const Spec& spec, int out_fd, bool err_null, std::string& error) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (out_fd >= 0) {
    posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  } else if (!spec.log_path.empty()) {
    posix_spawn_file_actions_addopen(&fa, 1, spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  } else {
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  }
  if (err_null) posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  else posix_spawn_file_actions_adddup2(&fa, 1, 2);
  if (!spec.cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, spec.cwd.c_str());

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  auto argv_s = spec.argv;
  auto env_s = merged_env(spec.env);
  auto argv = c_array(argv_s);
  auto envp = c_array(env_s);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, argv[0], &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    error = spec.argv[0] + ": cannot start (" + std::strerror(rc) + ")";
    return -1;
  }
  return pid;
}

// TERM the group, then KILL it if it lingers; reaps the leader.
int kill_group(pid_t pid) {
  ::kill(-pid, SIGTERM);
  auto t0 = Clock::now();
  int status = 0;
  while (since(t0) < 3.0) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      ::kill(-pid, SIGKILL);  // stragglers of the group
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(-pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return status;
}
}  // namespace

std::string Result::describe() const {
  if (!spawn_error.empty()) return spawn_error;
  if (interrupted) return "interrupted";
  if (timed_out) return "timed out after " + std::to_string(std::lround(seconds)) + " s";
  if (signal) return std::string("killed by SIG") + (sigabbrev_np(signal) ? sigabbrev_np(signal) : "?");
  return "exit " + std::to_string(exit_code);
}

Result run(const Spec& spec, const std::atomic<bool>* stop) {
  Result r;
  auto t0 = Clock::now();
  pid_t pid = spawn(spec, -1, false, r.spawn_error);
  if (pid < 0) return r;
  int status = 0;
  while (true) {
    pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (stop && stop->load()) {
      r.interrupted = true;
      status = kill_group(pid);
      break;
    }
    if (spec.timeout_s > 0 && since(t0) > spec.timeout_s) {
      r.timed_out = true;
      status = kill_group(pid);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  r.seconds = since(t0);
  if (!r.interrupted && !r.timed_out) {
    if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    else if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  }
  return r;
}

bool capture(const std::vector<std::string>& argv, std::string& out, const std::string& cwd, double timeout_s) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  Spec spec{argv, cwd, {}, "", timeout_s};
  std::string err;
  pid_t pid = spawn(spec, fds[1], true, err);
  ::close(fds[1]);
  if (pid < 0) {
    ::close(fds[0]);
    return false;
  }
  out.clear();
  auto t0 = Clock::now();
  char buf[4096];
  bool timed_out = false;
  while (true) {
    pollfd p{fds[0], POLLIN, 0};
    int n = ::poll(&p, 1, 100);
    if (n > 0) {
      ssize_t k = ::read(fds[0], buf, sizeof buf);
      if (k <= 0) break;
      out.append(buf, size_t(k));
    }
    if (since(t0) > timeout_s) {
      timed_out = true;
      break;
    }
  }
  ::close(fds[0]);
  int status = 0;
  if (timed_out) status = kill_group(pid);
  else ::waitpid(pid, &status, 0);
  return !timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace opf::proc
