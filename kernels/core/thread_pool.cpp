// One pool of worker threads behind every opf_host (opforge/threads.h). A parallel_for hands
// out task indices from an atomic counter to the caller and up to num_threads - 1 workers; which
// thread runs a task never matters to the result (ops make tasks independent of the count).
// A parallel_for issued from inside a task, or while another thread's parallel_for holds the
// pool, runs its tasks on the calling thread.
#include "opforge/threads.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
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
      pending_ = helpers;
      ++generation_;
    }
    cv_.notify_all();
    work();
    std::unique_lock lk(mu_);
    done_cv_.wait(lk, [&] { return pending_ == 0; });
  }

 private:
  struct Job {
    opf_task_fn fn = nullptr;
    void* ctx = nullptr;
    int64_t ntasks = 0;
    int helpers = 0;
  };

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
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return generation_ != seen; });
        seen = generation_;
        if (index >= job_.helpers) continue;
      }
      work();
      std::lock_guard lk(mu_);
      if (--pending_ == 0) done_cv_.notify_all();
    }
  }

  std::mutex submit_;  // one parallel_for at a time
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<std::thread> workers_;
  Job job_;
  std::atomic<int64_t> next_{0};
  int pending_ = 0;
  uint64_t generation_ = 0;
};

void pool_parallel_for(const opf_host* self, int64_t ntasks, opf_task_fn fn, void* ctx) {
  Pool::instance().run(self->num_threads, ntasks, fn, ctx);
}

}  // namespace

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
