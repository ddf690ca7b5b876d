#include "matrix/serve_client.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "opforge/error.h"

namespace opf::matrix {

ServeClient::ServeClient(const std::string& label, const std::vector<std::string>& argv,
                         const std::vector<std::pair<std::string, std::string>>& env, const std::string& log_path)
    : label_(label), log_(log_path) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) throw Error(label_ + ": pipe: " + std::strerror(errno));
  const int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) throw Error(log_path + ": cannot write: " + std::strerror(errno));
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_ = fork();
  if (pid_ < 0) throw Error(label_ + ": fork: " + std::strerror(errno));
  if (pid_ == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(log_fd, 2);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    execv(args[0], args.data());
    dprintf(2, "cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  ::close(log_fd);
  to_ = in[1];
  from_ = out[0];
  signal(SIGPIPE, SIG_IGN);  // a dead child surfaces as a write error, not as our death
}

ServeClient::~ServeClient() {
  if (pid_ <= 0) return;
  if (to_ >= 0) {
    (void)!::write(to_, "quit\n", 5);
    ::close(to_);
  }
  if (from_ >= 0) ::close(from_);
  for (int i = 0; i < 100; ++i) {  // up to 5 s to free its staged case and exit
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
    usleep(50000);
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

void ServeClient::send(const std::string& line) {
  const std::string s = line + "\n";
  for (size_t done = 0; done < s.size();) {
    const ssize_t n = ::write(to_, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(label_ + ": the benchmark server is gone (see " + log_ + ")");
    done += size_t(n);
  }
}

std::string ServeClient::receive(double timeout_s) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    if (const size_t nl = buffered_.find('\n'); nl != std::string::npos) {
      std::string line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      return line;
    }
    const double left = std::chrono::duration<double>(deadline - clock::now()).count();
    if (left <= 0)
      throw Error(label_ + ": no reply from the benchmark server within " + std::to_string(int(timeout_s)) +
                  " s (see " + log_ + ")");
    pollfd p{from_, POLLIN, 0};
    const int r = poll(&p, 1, int(left * 1000) + 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(from_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(label_ + ": the benchmark server exited (see " + log_ + ")");
    buffered_.append(buf, size_t(n));
  }
}

std::vector<std::string> ServeClient::list(double timeout_s) {
  send("list");
  std::vector<std::string> names;
  for (std::string l; (l = receive(timeout_s)) != ".";) names.push_back(l);
  return names;
}

}  // namespace opf::matrix
