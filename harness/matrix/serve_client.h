// The driver's end of `opforge-kernel-bench --ab-serve` (suites/ab_serve.h): a child process
// spoken to over pipes, one request line, one reply line, each reply awaited with a timeout.
// The child's stderr goes to a log file; a dead or silent child is an opf::Error naming that log.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace opf::matrix {

class ServeClient {
 public:
  ServeClient(const std::string& label, const std::vector<std::string>& argv,
              const std::vector<std::pair<std::string, std::string>>& env, const std::string& log_path);
  ~ServeClient();  // "quit", then SIGKILL when it does not exit
  ServeClient(const ServeClient&) = delete;
  ServeClient& operator=(const ServeClient&) = delete;

  void send(const std::string& line);
  std::string receive(double timeout_s);
  std::string request(const std::string& line, double timeout_s) {
    send(line);
    return receive(timeout_s);
  }
  std::vector<std::string> list(double timeout_s);  // the "list" request

 private:
  std::string label_, log_;
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  std::string buffered_;
};

}  // namespace opf::matrix
