#include "matrix/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace opf::matrix {
namespace {
double secs(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

std::string format_duration(double s) {
  long t = std::lround(s);
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

Progress::Progress(int total) : total_(total), tty_(isatty(2)), t0_(std::chrono::steady_clock::now()) {
  if (tty_)
    painter_ = std::thread([this] {
      std::unique_lock<std::mutex> lk(mu_);
      while (!stopping_) {
        render_locked();
        cv_.wait_for(lk, std::chrono::milliseconds(500));
      }
    });
}

Progress::~Progress() { stop(); }

void Progress::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) return;
    stopping_ = true;
    if (tty_) std::fprintf(stderr, "\r\033[K");
  }
  cv_.notify_all();
  if (painter_.joinable()) painter_.join();
}

void Progress::render_locked() {
  std::string line = "[";
  line.append(format_duration(secs(t0_))).append("]");
  for (const auto& [slot, a] : active_)
    line.append("  cell ")
        .append(std::to_string(a.index))
        .append("/")
        .append(std::to_string(total_))
        .append(" ")
        .append(a.cell)
        .append(": ")
        .append(a.step)
        .append(" ")
        .append(format_duration(secs(a.step_t0)))
        .append(" (cell ")
        .append(format_duration(secs(a.cell_t0)))
        .append(")");
  if (active_.empty()) line += "  waiting";
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
}

void Progress::step(int slot, int index, const std::string& cell, const std::string& step) {
  std::lock_guard<std::mutex> lk(mu_);
  auto now = std::chrono::steady_clock::now();
  auto it = active_.find(slot);
  if (it == active_.end() || it->second.cell != cell) active_[slot] = Active{index, cell, step, now, now};
  else it->second.step = step, it->second.step_t0 = now;
  if (tty_) {
    render_locked();
  } else {
    const auto& a = active_[slot];
    std::fprintf(stderr, "[%s] cell %d/%d %s: %s (cell %s)\n", format_duration(secs(t0_)).c_str(), index, total_,
                 cell.c_str(), step.c_str(), format_duration(secs(a.cell_t0)).c_str());
  }
}

void Progress::done(int slot, const std::string& message) {
  std::lock_guard<std::mutex> lk(mu_);
  active_.erase(slot);
  if (tty_) std::fprintf(stderr, "\r\033[K");
  std::fprintf(stderr, "%s\n", message.c_str());
  if (tty_) render_locked();
}

}  // namespace opf::matrix
