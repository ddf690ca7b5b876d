// The Chakra graph of a text workload, per NPU, as .et bytes (GlobalMetadata + nodes).
//
// What each parallelism type becomes (per pass; "comm" = COMM_COLL_NODE with int64 attrs
// comm_type and comm_size, every dependency a data dep):
//  MICRO   one weight-gradient (WG) comm per layer, no deps.
//  DATA    FWD chain; backward in reverse: BWD_WG, its WG comm, BWD_IG (none for layer 0).
//  MODEL   FWD + forward comm per layer, chained through the comms; backward BWD_IG (after the
//          next layer's BWD_WG and IG comm), IG comm (none for layer 0), BWD_WG.
//  HYBRID_DATA_MODEL / HYBRID_MODEL_DATA   MODEL plus a WG comm after each BWD_WG.
//  HYBRID_DLRM(_ENHANCED) with last bottom layer B   FWD chain, a forward comm only for
//          ALLTOALL, FWD of B also after layer 0's forward all-to-all; backward BWD_WG, its WG
//          comm, BWD_IG (not layer 0); after BWD_IG of layer B+1 the embedding all-to-all with
//          layer 0's input-gradient type and size, which layer 0's BWD_WG waits for.
//  From the second pass on, a layer's FWD also waits for its previous-pass WG comm (DATA,
//  hybrids, DLRM; BWD_WG where that layer has no WG comm) or BWD_WG (MODEL).
//
// compat_reference reproduces the reference TextConverter's bytes, including its bugs: one
// node-id counter over all NPUs (NPU k starts at k x nodes per file), NONE and unknown comm
// types written as ALL_REDUCE comms, layer 0's IG comm skipped by the header's layer count,
// duplicate node names. Where the reference crashes, this throws InputError instead (and
// from_text writes nothing). The default mode deviates on purpose:
//  * ids start at 0 in every NPU's file (the files of all NPUs are identical);
//  * a NONE comm makes no node; its dependents depend on the node that would have fed it;
//  * layer 0 has no IG comm because it is the first layer in the file, not by the header count;
//  * comm names carry their phase (COMM_COLL_NODE_<layer>_{FWD,IG,WG}_<TYPE>), and with more
//    than one pass every name ends in _PASS<k>, so names are unique in a file;
//  * DLRM's last bottom layer B must satisfy 1 <= B <= layers-2 and layer 0's forward comm
//    must be ALLTOALL (the reference crashes, or silently drops the embedding all-to-all);
//  * comm columns the type does not model are reported (one warning per column kind).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "text_workload.h"

namespace opf::chakra {

struct TextGraphOptions {
  bool compat_reference = false;
  uint64_t passes = 1;
  std::function<void(const std::string&)> warn;
};

class TextGraphBuilder {
 public:
  TextGraphBuilder(const TextWorkload& w, const TextGraphOptions& opt);  // throws InputError
  ~TextGraphBuilder();
  // The next NPU's file. In compat mode the id counter and per-layer state carry over from the
  // previous NPU, as in the reference; in the default mode every call returns the same bytes.
  std::string build_npu();
  uint64_t nodes_written() const;  // by the last build_npu()

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace opf::chakra
