// One pool of worker threads behind every opf_host (opforge/threads.h). A parallel_for hands
// out task indices from an atomic counter to the caller and up to num_threads - 1 workers; which
// thread runs a task never matters to the result (ops make tasks independent of the count).
// A parallel_for issued from inside a task, or while another thread's parallel_for holds the
// pool, runs its tasks on the calling thread.
//
// Idle workers, and a caller waiting for them, spin for kSpin before they sleep (OpenMP's
// blocktime, much shorter): a call after call (a training step, a benchmark) then never waits on
// a futex wake-up, whose latency on a VM is tens of microseconds and depends on which CPU the
// sleeper last ran on — state a process keeps for its life, so two processes running the same
// 50 us call at 2 threads differed by up to 30 % (issue 13's A/A runs of syncbn).
#include "opforge/threads.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "opforge/error.h"

namespace opf {
namespace {

thread_local bool t_in_task = false;

class Pool {
 public:
  static Pool& instance() {
    static Pool* p = new Pool;  // never destroyed: workers may outlive static destruction order
    return *p;
  }

  void run(int threads, int64_t ntasks, opf_task_fn fn, void* ctx) {
    if (ntasks <= 0) return;
    std::unique_lock busy(submit_, std::try_to_lock);
    if (threads <= 1 || ntasks == 1 || t_in_task || !busy.owns_lock()) {
      serial(ntasks, fn, ctx);
      return;
    }
    const int helpers = int(std::min<int64_t>(threads, ntasks)) - 1;
    grow(helpers);
    {
      std::lock_guard lk(mu_);
      job_ = Job{fn, ctx, ntasks, helpers};
      next_.store(0);
      pending_.store(helpers);
      generation_.store(generation_.load() + 1);
    }
    cv_.notify_all();  // no system call while every worker is still spinning
    work();
    spin_while([&] { return pending_.load(std::memory_order_acquire) != 0; });
    std::unique_lock lk(mu_);
    done_cv_.wait(lk, [&] { return pending_.load() == 0; });
  }

  void pin(std::vector<int> cpus) {
    std::lock_guard lk(mu_);
    cpus_ = std::move(cpus);
    placement_.store(placement_.load() + 1);
  }

 private:
  struct Job {
    opf_task_fn fn = nullptr;
    void* ctx = nullptr;
    int64_t ntasks = 0;
    int helpers = 0;
  };

  static constexpr auto kSpin = std::chrono::microseconds(100);

  // Polls `busy` for up to kSpin; the caller then sleeps on its condition if still needed.
  template <class Busy>
  static void spin_while(Busy&& busy) {
    const auto until = std::chrono::steady_clock::now() + kSpin;
    for (int i = 0; busy(); ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      if (i % 64 == 63 && std::chrono::steady_clock::now() >= until) return;
    }
  }

  static void serial(int64_t ntasks, opf_task_fn fn, void* ctx) {
    const bool outer = t_in_task;
    t_in_task = true;
    for (int64_t i = 0; i < ntasks; ++i) fn(ctx, i);
    t_in_task = outer;
  }

  void work() {
    t_in_task = true;
    for (int64_t i; (i = next_.fetch_add(1)) < job_.ntasks;) job_.fn(job_.ctx, i);
    t_in_task = false;
  }

  void grow(int helpers) {
    std::lock_guard lk(mu_);
    while (int(workers_.size()) < helpers) {
      const int index = int(workers_.size());
      workers_.emplace_back([this, index] { loop(index); }).detach();
    }
  }

  void loop(int index) {
    uint64_t seen = 0, placed = 0;
    cpu_set_t start;
    if (sched_getaffinity(0, sizeof start, &start) != 0) placed = ~uint64_t(0);  // never placed
    for (;;) {
      spin_while([&] { return generation_.load(std::memory_order_acquire) == seen; });
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return generation_.load() != seen; });
        seen = generation_.load();
        if (placed != ~uint64_t(0) && placement_.load() != placed) {
          placed = placement_.load();
          place(index, start);
        }
        if (index >= job_.helpers) continue;
      }
      work();
      std::lock_guard lk(mu_);
      if (pending_.fetch_sub(1) == 1) done_cv_.notify_all();
    }
  }

  // Under mu_: this worker on its CPU from cpus_, else back on the mask it started with.
  void place(int index, const cpu_set_t& start) {
    cpu_set_t set = start;
    if (!cpus_.empty()) {
      CPU_ZERO(&set);
      CPU_SET(cpus_[size_t(index) % cpus_.size()], &set);
    }
    sched_setaffinity(0, sizeof set, &set);  // this thread; a refused mask leaves it where it was
  }

  std::mutex submit_;  // one parallel_for at a time
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<std::thread> workers_;
  Job job_;
  std::atomic<int64_t> next_{0};
  // written under mu_, also read without it by the spinning waits
  std::atomic<int> pending_{0};
  std::atomic<uint64_t> generation_{0};
  std::vector<int> cpus_;               // pin_workers' list, under mu_
  std::atomic<uint64_t> placement_{0};  // bumped by pin_workers; each worker applies it on waking
};

void pool_parallel_for(const opf_host* self, int64_t ntasks, opf_task_fn fn, void* ctx) {
  Pool::instance().run(self->num_threads, ntasks, fn, ctx);
}

}  // namespace

void pin_workers(std::vector<int> cpus) { Pool::instance().pin(std::move(cpus)); }

const opf_host* host_threads(int n) {
  if (n <= 0) n = default_num_threads();
  static std::mutex mu;
  static std::map<int, std::unique_ptr<opf_host>>* hosts = new std::map<int, std::unique_ptr<opf_host>>;
  std::lock_guard lk(mu);
  auto& h = (*hosts)[n];
  if (!h) h = std::make_unique<opf_host>(opf_host{n, &pool_parallel_for, nullptr});
  return h.get();
}

}  // namespace opf
