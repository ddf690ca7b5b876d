// Running a CPU module's tasks on the caller's thread pool (abi.h's opf_host). Task boundaries
// must depend only on the problem (never on host->num_threads): that is what keeps results
// bitwise identical for any thread count. Tasks must not throw.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "cpu/scratch.h"
#include "opforge/abi.h"

namespace opf::cpu {

template <class F>
void parallel_for(const opf_host* host, int64_t ntasks, F&& f) {
  if (!host || host->num_threads <= 1 || ntasks <= 1) {
    for (int64_t i = 0; i < ntasks; ++i) f(i);
    return;
  }
  using Fn = std::remove_reference_t<F>;
  host->parallel_for(
      host, ntasks, [](void* ctx, int64_t i) { (*static_cast<Fn*>(ctx))(i); }, &f);
}

// Rows per task for row-independent work: tasks of about 256 KiB of traffic, so that small
// problems stay on one thread and large ones split finely enough to balance.
inline int64_t rows_per_task(int64_t rows, double bytes_per_row) {
  const double target = 256.0 * 1024.0;
  const int64_t r = bytes_per_row > 0 ? int64_t(target / bytes_per_row) : rows;
  return std::clamp<int64_t>(r, 1, std::max<int64_t>(rows, 1));
}

// Runs f(begin, end) over [0, rows) in chunks of `chunk` rows, as tasks.
template <class F>
void parallel_rows(const opf_host* host, int64_t rows, int64_t chunk, F&& f) {
  if (rows <= 0) return;
  const int64_t ntasks = (rows + chunk - 1) / chunk;
  parallel_for(host, ntasks, [&](int64_t t) { f(t * chunk, std::min(rows, (t + 1) * chunk)); });
}

}  // namespace opf::cpu

namespace opf::cpu {

// Column sums over rows, the same bits for any thread count: rows are cut into tasks of whole
// `block`-row groups (at most 64 tasks, boundaries from the row count alone); f(r0, r1, totals)
// adds rows [r0, r1) into its task's f64 totals[0, width); the task totals are then added in task
// order into out[0, width) (resized and zeroed here). Totals is std::vector<double>, a template
// parameter only so that the calls on it are dependent: clang instantiates a non-dependent callee
// where the template is defined, ~17 ms of every JIT module's front end, summing columns or not.
struct ColumnTotals;  // its thread_scratch

template <class F, class Totals>
void parallel_column_sums(const opf_host* host, int64_t rows, int64_t block, size_t width, Totals& out, F&& f) {
  static_assert(std::is_same_v<Totals, std::vector<double>>);
  block = std::max<int64_t>(block, 1);
  const int64_t blocks = (rows + block - 1) / block;
  const int64_t chunk = std::max<int64_t>(1, (blocks + 63) / 64) * block;
  const int64_t ntasks = std::max<int64_t>(1, (rows + chunk - 1) / chunk);
  if (ntasks == 1) {  // one task adds straight into out: the same sums, without the extra passes
    out.assign(width, 0.0);
    f(0, rows, out.data());
    return;
  }
  // Each task zeroes its own totals, and the task totals are added column block by column block
  // in parallel: serial, these two passes over ntasks * width doubles (4 MiB for 64 tasks of 8192
  // columns) cost a tenth of a large backward's time. Every column is still summed in task order.
  double* const totals = thread_scratch<ColumnTotals, 1, double>(size_t(ntasks) * width);
  parallel_for(host, ntasks, [&](int64_t t) {
    double* mine = totals + size_t(t) * width;
    std::fill(mine, mine + width, 0.0);
    f(t * chunk, std::min(rows, (t + 1) * chunk), mine);
  });
  out.assign(width, 0.0);
  constexpr size_t kColumns = 2048;  // 16 KiB of out per task
  const int64_t column_tasks = int64_t((width + kColumns - 1) / kColumns);
  parallel_for(host, column_tasks, [&](int64_t c) {
    const size_t k0 = size_t(c) * kColumns, k1 = std::min(width, k0 + kColumns);
    double* o = out.data();
    for (int64_t t = 0; t < ntasks; ++t) {
      const double* src = totals + size_t(t) * width;
      for (size_t k = k0; k < k1; ++k) o[k] += src[k];
    }
  });
}

}  // namespace opf::cpu
