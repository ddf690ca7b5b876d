// The op contract (ABI v2) from a caller's side, on layer_norm's CPU module as the loader gives it
// (prebuilt or JIT): CallBuilder refuses malformed calls before any module runs (one line naming
// the argument or param), a module refuses a strided view of an argument the manifest does not
// mark `view` (run and supports give the same reason), and the thread pool honours its count and
// its workers' placement.
#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "opforge/call.h"
#include "opforge/error.h"
#include "opforge/loader.h"
#include "opforge/threads.h"

namespace opf {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const OpInfo& layer_norm() {
  const OpInfo* op = find_op("layer_norm");
  if (!op) throw Error("layer_norm is not built");
  return *op;
}

struct Buffers {
  int64_t rows = 4, cols = 6;
  std::vector<float> x = std::vector<float>(size_t(rows * cols), 1.5f), g = std::vector<float>(size_t(cols), 1.0f),
                     b = std::vector<float>(size_t(cols), 0.25f), y = std::vector<float>(size_t(rows * cols), NAN),
                     mean = std::vector<float>(size_t(rows), NAN), rstd = std::vector<float>(size_t(rows), NAN);
  void add_all(CallBuilder& c, const Shape& x_strides = {}) {
    c.add("x", x.data(), DType::f32, {rows, cols}, x_strides).add("gamma", g.data(), DType::f32, {cols});
    c.add("beta", b.data(), DType::f32, {cols}).add("y", y.data(), DType::f32, {rows, cols});
    c.add("mean", mean.data(), DType::f32, {rows}).add("rstd", rstd.data(), DType::f32, {rows});
  }
};

TEST(Contract, BuilderRefusesMalformedCallsNamingTheProblem) {
  const OpInfo& op = layer_norm();
  Buffers buf;
  EXPECT_NE(error_of([&] { CallBuilder c(op, "sideways"); }).find("no entry 'sideways' (entries: forward, backward)"),
            std::string::npos);
  CallBuilder c(op, "forward");
  EXPECT_NE(error_of([&] { c.param("eps", -1.0); }).find("param 'eps' = -1 must be > 0"), std::string::npos)
      << error_of([&] { c.param("eps", -1.0); });
  EXPECT_NE(error_of([&] { c.param("epsilon", 1.0); }).find("no param 'epsilon'"), std::string::npos);
  EXPECT_NE(error_of([&] { c.add("z", buf.x.data(), DType::f32, {1}); }).find("no argument 'z'"), std::string::npos);
  c.add("x", buf.x.data(), DType::f32, {buf.rows, buf.cols});
  EXPECT_NE(error_of([&] { c.add("x", buf.x.data(), DType::f32, {1}); }).find("'x' is one tensor, not a list"),
            std::string::npos);
  EXPECT_NE(error_of([&] { c.abi(); }).find("argument 'gamma' is missing"), std::string::npos);
}

TEST(Contract, StridedViewOfADenseOnlyArgumentIsRefused) {
  const OpInfo& op = layer_norm();
  const opf_module_info* m = Loader::instance().load(op, "cpu").info;
  Buffers dense, strided;
  CallBuilder ok(op, "forward");
  dense.add_all(ok);
  EXPECT_EQ(ok.supports(m), "");
  ok.run(m);
  EXPECT_FLOAT_EQ(dense.y[0], 0.25f);  // a constant row normalises to beta
  // x as a view with a row stride of 12 (every other row of a wider buffer)
  strided.x.resize(size_t(2 * strided.rows * strided.cols), 1.5f);
  CallBuilder view(op, "forward");
  strided.add_all(view, {2 * strided.cols, 1});
  const std::string why = view.supports(m);
  EXPECT_NE(why.find("argument 0 (x) is not contiguous"), std::string::npos) << why;
  EXPECT_EQ(error_of([&] { view.run(m); }).find(why) != std::string::npos, true) << "run and supports disagree";
  for (float v : strided.y) EXPECT_TRUE(std::isnan(v)) << "output written despite the refusal";
}

TEST(Contract, ThreadPoolRunsEveryTaskOnAtMostItsThreadCount) {
  for (int n : {1, 2, 3}) {
    const opf_host* h = host_threads(n);
    ASSERT_EQ(h->num_threads, n);
    struct Ctx {
      std::vector<std::atomic<int>> hits = std::vector<std::atomic<int>>(1000);
      std::mutex mu;
      std::set<std::thread::id> ids;
    } ctx;
    h->parallel_for(
        h, 1000,
        [](void* p, int64_t i) {
          auto* c = static_cast<Ctx*>(p);
          c->hits[size_t(i)]++;
          std::lock_guard lk(c->mu);
          c->ids.insert(std::this_thread::get_id());
        },
        &ctx);
    for (auto& hit : ctx.hits) ASSERT_EQ(hit.load(), 1);
    EXPECT_LE(int(ctx.ids.size()), n);
  }
}

// pin_workers (the benchmarks' fixed placement): every worker runs its tasks on the CPU it was
// given, and back on its own mask once the list is empty.
TEST(Contract, ThreadPoolWorkersRunWherePinned) {
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof mine, &mine), 0);
  if (CPU_COUNT(&mine) < 2) GTEST_SKIP() << "skipped: this process may use 1 CPU, pinning moves nothing";
  int first = 0;
  while (!CPU_ISSET(first, &mine)) ++first;
  struct Ctx {
    std::thread::id caller = std::this_thread::get_id();
    std::mutex mu;
    std::vector<cpu_set_t> worker_masks;
  };
  auto worker_masks = [](Ctx& ctx) {
    const opf_host* h = host_threads(3);
    h->parallel_for(
        h, 200,
        [](void* p, int64_t) {
          auto* c = static_cast<Ctx*>(p);
          std::this_thread::sleep_for(std::chrono::microseconds(200));  // every thread gets tasks
          if (std::this_thread::get_id() == c->caller) return;
          cpu_set_t m;
          sched_getaffinity(0, sizeof m, &m);
          std::lock_guard lk(c->mu);
          c->worker_masks.push_back(m);
        },
        &ctx);
  };
  pin_workers({first});
  Ctx pinned;
  worker_masks(pinned);
  pin_workers({});
  Ctx freed;
  worker_masks(freed);
  ASSERT_FALSE(pinned.worker_masks.empty()) << "no worker ran a task";
  for (const cpu_set_t& m : pinned.worker_masks)
    EXPECT_TRUE(CPU_COUNT(&m) == 1 && CPU_ISSET(first, &m)) << "a worker ran outside CPU " << first;
  ASSERT_FALSE(freed.worker_masks.empty()) << "no worker ran a task";
  for (const cpu_set_t& m : freed.worker_masks)
    EXPECT_TRUE(CPU_EQUAL(&m, &mine)) << "a worker stayed pinned after pin_workers({})";
}

}  // namespace
}  // namespace opf
