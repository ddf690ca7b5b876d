#include "peer_check.h"

#include <cmath>
#include <exception>
#include <vector>

#include "../seed.h"
#include "../tolerance.h"

namespace opf::suites::peers {
namespace {

// As kernel_test.cpp: a reference value the storage dtype cannot hold puts the variant outside
// the op's domain for this dtype, so it checks nothing.
bool out_of_range(const DrawnCase& d) {
  for (const RefArg& r : d.ref) {
    if (r.desc->role == Role::in || !dtype_is_float(r.desc->dtype)) continue;
    const double mx = dtype_max_finite(r.desc->dtype);
    for (double v : r.v)
      if (std::isfinite(v) && std::fabs(v) > mx) return true;
  }
  return false;
}

}  // namespace

CheckOutcome check_peer(const OpInfo& op, const Adapter& a, DType dtype, std::string_view entry, const Shape& shape,
                        int threads, uint64_t seed, const std::string& name) {
  CheckOutcome out;
  const Params params = op.default_params();
  const PeerCase pc{entry, dtype, shape, params, threads};
  if (std::string why = a.unsupported(pc); !why.empty()) {
    out.unsupported = why;
    return out;
  }
  try {
    for (Variant v : all_variants()) {
      if (v == Variant::nan) continue;
      const std::string vname(variant_name(v));
      DrawnCase d = draw_case(op, entry, dtype, shape, v, test_seed(seed, "peer/" + name + "/" + vname), true);
      if (!d.desc.unsupported.empty()) {
        out.unsupported = "case not supported by the op: " + d.desc.unsupported;
        return out;
      }
      if (out_of_range(d)) continue;
      auto run = a.make(pc, d);
      run->run();
      int compared = 0;
      for (size_t i = 0; i < d.host.size(); ++i) {
        const ArgDesc& arg = *d.host[i].desc;
        std::vector<double> got;
        if (arg.role == Role::in || !run->output(arg.name, arg.list_index, got)) continue;
        const std::string where = "variant " + vname + ", output '" + arg.name + "'" +
                                  (arg.list_index >= 0 ? "[" + std::to_string(arg.list_index) + "]" : "");
        if (got.size() != size_t(arg.numel())) {
          out.failure = where + ": the peer gave " + std::to_string(got.size()) + " values, the op has " +
                        std::to_string(arg.numel());
          return out;
        }
        std::vector<std::byte> stored(size_t(arg.numel()) * dtype_size(arg.dtype));  // as a kernel would store it
        for (int64_t j = 0; j < arg.numel(); ++j) store_element(arg.dtype, stored.data(), j, got[size_t(j)]);
        const Tolerance tol = tolerance_for(arg, d.desc, d.kappa, d.ref[i].v, &d.sensitivity[i], 1.0);
        const Comparison cmp = compare(arg, stored.data(), d.ref[i].v, tol);
        if (!cmp.ok) {
          out.failure = where + ": " + cmp.first_bad;
          return out;
        }
        ++compared;
      }
      if (compared == 0) {
        out.failure = "variant " + vname + ": the adapter reports none of the op's outputs";
        return out;
      }
      out.compared += compared;
    }
  } catch (const std::exception& e) {
    out.failure = e.what();
  }
  return out;
}

}  // namespace opf::suites::peers
