// Exclusive ("self") time of CPU ops on one thread: inclusive duration minus the merged
// intervals of the ops it contains, with the reference linker's exact rules (docs/chakra.md §4.2):
// ops are ordered by (ts, dur) [reference] or (ts, -dur) [default]; op k subtracts every later
// op j with ts_j + dur_j <= ts_k + dur_k; contained intervals are merged (touching ones too)
// and each merged length is subtracted in start order, in Python int/float arithmetic.
// With the reference order a parent and a child that start at the same ts sort child first,
// so that child is not subtracted from the parent (the "equal-ts tie quirk").
//
// Cost: after the sort, op k visits one entry per maximal contained op plus the ops that only
// partially overlap it (a jump table skips whole contained subtrees), i.e. O(n) for properly
// nested traces instead of the reference's O(n^2).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "py_num.h"

namespace opf::chakra {

struct TimedOp {
  PyNum ts, dur;
  uint32_t order = 0;  // final tie-break (file order)
};

enum class TieOrder { reference, parent_first };

// Returns the exclusive duration of each op (indexed like `ops`). A negative result (float
// rounding when children tile the parent exactly) is an error in reference order, as in the
// reference, and clamped to zero otherwise; `negative_at` receives the op index (or -1).
std::vector<PyNum> compute_exclusive(const std::vector<TimedOp>& ops, TieOrder order, int64_t& negative_at);

}  // namespace opf::chakra
