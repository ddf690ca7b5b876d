// Child processes for the matrix runner: each step runs in its own process group, output goes to
// a log file, and a timeout or a stop request (Ctrl-C) kills the whole group (meson -> ninja ->
// compilers -> test programs), so a hanging cell cannot stall the run.
#pragma once

#include <atomic>
#include <string>
#include <utility>
#include <vector>

namespace opf::proc {

struct Spec {
  std::vector<std::string> argv;
  std::string cwd;                                       // "" = inherit
  std::vector<std::pair<std::string, std::string>> env;  // set on top of this process's env
  std::string log_path;                                  // stdout+stderr appended ("" = /dev/null)
  double timeout_s = 0;                                  // 0 = none
};

struct Result {
  int exit_code = -1;
  int signal = 0;  // killed by this signal (not by us)
  bool timed_out = false;
  bool interrupted = false;  // stop was requested while it ran
  std::string spawn_error;   // non-empty: could not start
  double seconds = 0;
  bool ok() const { return spawn_error.empty() && !timed_out && !interrupted && signal == 0 && exit_code == 0; }
  std::string describe() const;  // "exit 1", "timed out after 600 s", "killed by SIGSEGV", ...
};

Result run(const Spec& spec, const std::atomic<bool>* stop = nullptr);

// Runs argv and returns its stdout (stderr discarded); false when it cannot run or exits non-zero.
bool capture(const std::vector<std::string>& argv, std::string& out, const std::string& cwd = "",
             double timeout_s = 60);

}  // namespace opf::proc
