// A peer adapter checked against the op's float64 reference: the benchmark's "ratio vs peer" only
// means something if the adapter computes the op we benchmark it against. The correctness suite
// does this for the adapters it links (kernel_test.cpp, `peer.*` tests); the benchmark binary
// does it with this for every peer it times, before timing it, because some peer libraries
// (torch) are linked into the benchmark only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "peer.h"

namespace opf::suites::peers {

struct CheckOutcome {
  std::string unsupported;  // the adapter or the op refuses this case (not a failure)
  std::string failure;      // empty: every reported output within tolerance on every variant
  int compared = 0;         // outputs compared, over all variants
};

// Runs the adapter on each variant of one case (except NaN: a peer is checked for computing the
// same op, not for NaN semantics) drawn with test_seed(seed, "peer/" + name + "/" + variant),
// and compares each output it reports with the per-dtype tolerance our kernels get.
CheckOutcome check_peer(const OpInfo& op, const Adapter& a, DType dtype, std::string_view entry, const Shape& shape,
                        int threads, uint64_t seed, const std::string& name);

}  // namespace opf::suites::peers
