#include "suite_exe.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "opforge/build_info.h"
#include "opforge/error.h"

extern char** environ;

namespace opf::suites {

std::string find_suite_executable(const std::string& name) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> tried;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) tried.push_back(self.parent_path() / "suites" / name);
  tried.push_back(fs::path(build::build_root()) / "harness" / "suites" / name);
  for (const fs::path& p : tried)
    if (fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0) return p.string();
  std::string where;
  for (const fs::path& p : tried) {
    if (!where.empty()) where += ", ";
    where += p.string();
  }
  throw Error(name + " not found (looked at " + where +
              "); configure with -Dtests=enabled / -Dbench=enabled and build it");
}

int run_child(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  if (const int rc = posix_spawn(&pid, args[0], nullptr, nullptr, args.data(), environ); rc != 0)
    throw Error("cannot run " + argv[0] + ": " + std::strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw Error("waiting for " + argv[0] + ": " + std::strerror(errno));
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace opf::suites
