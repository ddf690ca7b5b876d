// collectives: per rank, COMP nodes alternating with COMM_COLL nodes. The collectives come from
// the seed alone, so every rank has the same ones in the same order, and each waits for the
// previous one: ranks cannot issue them in different orders, which would deadlock a simulator.
#include "gen_context.h"

namespace opf::chakra::gen {

namespace {
constexpr ChakraProtoMsg::CollectiveCommType kKinds[] = {ChakraProtoMsg::ALL_REDUCE, ChakraProtoMsg::ALL_GATHER,
                                                         ChakraProtoMsg::REDUCE_SCATTER, ChakraProtoMsg::ALL_TO_ALL,
                                                         ChakraProtoMsg::BROADCAST};
constexpr int64_t kComputeStream = 7, kCommStream = 20;
}  // namespace

void collectives(Context& c) {
  int64_t last_comp = -1, last_coll = -1;
  for (uint64_t k = 0; k < c.opt.nodes; ++k) {
    if (k % 2 == 0) {
      auto& n = c.begin(k, "COMP_NODE_" + std::to_string(k), ChakraProtoMsg::COMP_NODE);
      if (last_comp >= 0) n.add_data_deps(uint64_t(last_comp));
      n.set_duration_micros(c.compute_time());
      add_bool(n, "is_cpu_op", false);
      add_int64(n, "stream", kComputeStream);
      last_comp = int64_t(k);
    } else {
      auto type = kKinds[c.shape.below(sizeof kKinds / sizeof kKinds[0])];
      auto& n = c.begin(k, "COMM_COLL_NODE_" + std::to_string(k) + "_" + ChakraProtoMsg::CollectiveCommType_Name(type),
                        ChakraProtoMsg::COMM_COLL_NODE);
      n.add_data_deps(uint64_t(last_comp));
      if (last_coll >= 0) n.add_data_deps(uint64_t(last_coll));
      add_int64(n, "comm_type", type);
      add_int64(n, "comm_size", int64_t(uint64_t(1) << c.shape.between(10, 26)));
      add_bool(n, "is_cpu_op", false);
      add_int64(n, "stream", kCommStream);
      last_coll = int64_t(k);
    }
    c.emit();
  }
}

}  // namespace opf::chakra::gen
