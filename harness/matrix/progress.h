// The live progress line of `opforge matrix run` on stderr: which cells run, their step and
// elapsed time, redrawn in place on a terminal and printed once per step change otherwise.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace opf::matrix {

class Progress {
 public:
  explicit Progress(int total);
  ~Progress();
  void step(int slot, int index, const std::string& cell, const std::string& step);
  void done(int slot, const std::string& message);  // prints a permanent line
  void stop();

 private:
  struct Active {
    int index;
    std::string cell, step;
    std::chrono::steady_clock::time_point cell_t0, step_t0;
  };
  void render_locked();
  int total_;
  bool tty_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, Active> active_;
  std::chrono::steady_clock::time_point t0_;
  bool stopping_ = false;
  std::thread painter_;
};

std::string format_duration(double seconds);  // 1:05, 12:03:09

}  // namespace opf::matrix
