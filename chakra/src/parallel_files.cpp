#include "parallel_files.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace opf::chakra {

namespace {
unsigned cores() { return std::max(1u, std::thread::hardware_concurrency()); }
}  // namespace

unsigned resolve_jobs(int jobs, size_t n) {
  const unsigned want = jobs <= 0 ? cores() : unsigned(jobs);
  return unsigned(std::max<size_t>(1, std::min<size_t>(want, n)));
}

void for_each_file(size_t n, int jobs, const std::function<void(size_t)>& f) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t k; (k = next++) < n;) f(k);
  };
  std::vector<std::thread> ts;
  for (unsigned t = 1; t < resolve_jobs(jobs, n); ++t) ts.emplace_back(worker);
  worker();
  for (auto& t : ts) t.join();
}

unsigned parser_threads_per_file(unsigned workers) {
  // 0 = the reader's default; with several files in flight, more parser threads than cores
  // only add switching (measured: a 2-core machine gains nothing from 2 x 2 threads)
  return workers <= 1 ? 0 : std::max(1u, cores() / workers);
}

}  // namespace opf::chakra
