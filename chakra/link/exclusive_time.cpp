#include "exclusive_time.h"

#include <algorithm>
#include <numeric>

namespace opf::chakra {

std::vector<PyNum> compute_exclusive(const std::vector<TimedOp>& ops, TieOrder order, int64_t& negative_at) {
  negative_at = -1;
  const size_t n = ops.size();
  std::vector<uint32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0u);
  std::sort(idx.begin(), idx.end(), [&](uint32_t a, uint32_t b) {
    const TimedOp& x = ops[a];
    const TimedOp& y = ops[b];
    int c = py_cmp(x.ts, y.ts);
    if (c != 0) return c < 0;
    c = py_cmp(x.dur, y.dur);
    if (c != 0) return order == TieOrder::reference ? c < 0 : c > 0;
    return x.order < y.order;
  });
  std::vector<PyNum> ts(n), end(n);
  for (size_t k = 0; k < n; ++k) {
    ts[k] = ops[idx[k]].ts;
    end[k] = py_add(ops[idx[k]].ts, ops[idx[k]].dur);
  }
  // skip[j]: first position after j whose end is strictly later than end[j]; everything in
  // between lies inside op j (starts no earlier, ends no later).
  std::vector<uint32_t> skip(n);
  std::vector<uint32_t> stack;
  for (size_t j = n; j-- > 0;) {
    while (!stack.empty() && end[stack.back()] <= end[j]) stack.pop_back();
    skip[j] = stack.empty() ? uint32_t(n) : stack.back();
    stack.push_back(uint32_t(j));
  }
  std::vector<PyNum> out(n);
  for (size_t k = 0; k < n; ++k) {
    PyNum excl = ops[idx[k]].dur;
    bool open = false;
    PyNum cs, ce;  // current merged region
    size_t j = k + 1;
    while (j < n && ts[j] <= end[k]) {
      if (end[j] <= end[k]) {
        if (open && ts[j] <= ce) {
          if (end[j] > ce) ce = end[j];
        } else {
          if (open) excl = py_sub(excl, py_sub(ce, cs));
          cs = ts[j];
          ce = end[j];
          open = true;
        }
        j = skip[j];
      } else {
        ++j;
      }
    }
    if (open) excl = py_sub(excl, py_sub(ce, cs));
    if (excl.negative()) {
      if (order == TieOrder::reference) {
        if (negative_at < 0) negative_at = idx[k];
      } else {
        excl = excl.is_int ? PyNum::of_int(0) : PyNum::of_double(0.0);
      }
    }
    out[idx[k]] = excl;
  }
  return out;
}

}  // namespace opf::chakra
