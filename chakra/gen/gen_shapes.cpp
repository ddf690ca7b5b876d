// chain, fan and dag: COMP-only graphs of a given size, for scaling and layout tests.
#include <algorithm>
#include <vector>

#include "gen_context.h"

namespace opf::chakra::gen {

namespace {

void comp(Context& c, uint64_t id, const std::string& name, const std::vector<uint64_t>& data,
          const std::vector<uint64_t>& ctrl = {}) {
  auto& n = c.begin(id, name, ChakraProtoMsg::COMP_NODE);
  for (uint64_t d : data) n.add_data_deps(d);
  for (uint64_t d : ctrl) n.add_ctrl_deps(d);
  n.set_duration_micros(c.compute_time());
  add_int64(n, "num_ops", int64_t(c.shape.between(1, 1 << 20)));
  add_bool(n, "is_cpu_op", true);
  c.emit();
}

}  // namespace

void chain(Context& c) {
  for (uint64_t k = 0; k < c.opt.nodes; ++k) {
    std::vector<uint64_t> deps;
    if (k > 0) deps.push_back(k - 1);
    comp(c, k, "COMP_NODE_" + std::to_string(k), deps);
  }
}

void fan(Context& c) {
  const uint64_t n = c.opt.nodes;
  comp(c, 0, "FAN_ROOT", {});
  for (uint64_t k = 1; k + 1 < n; ++k) comp(c, k, "FAN_" + std::to_string(k), {0});
  if (n < 2) return;
  std::vector<uint64_t> all;
  for (uint64_t k = 1; k + 1 < n; ++k) all.push_back(k);
  if (all.empty()) all.push_back(0);
  comp(c, n - 1, "FAN_SINK", all);
}

void dag(Context& c) {
  constexpr uint64_t kWindow = 16;
  for (uint64_t k = 0; k < c.opt.nodes; ++k) {
    std::vector<uint64_t> data, ctrl;
    if (k > 0) {
      const uint64_t lo = k > kWindow ? k - kWindow : 0;
      const uint64_t want = c.shape.between(1, std::min<uint64_t>(3, k - lo));
      while (data.size() < want) {
        uint64_t d = c.shape.between(lo, k - 1);
        if (std::find(data.begin(), data.end(), d) == data.end()) data.push_back(d);
      }
      if (c.shape.below(4) == 0) {
        uint64_t d = c.shape.below(k);
        if (std::find(data.begin(), data.end(), d) == data.end()) ctrl.push_back(d);
      }
    }
    comp(c, k, "DAG_" + std::to_string(k), data, ctrl);
  }
}

}  // namespace opf::chakra::gen
