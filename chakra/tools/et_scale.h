// Trace scaling for benchmarks: a real host execution trace replicated N times. The process
// and thread root nodes are kept once; every other node is copied N times with fresh ids
// (id + k*stride), its parent remapped into the same copy (or kept when it is a root), and its
// rf_id shifted by k*rf_stride so a matching synthetic Kineto trace can be generated. Copies
// follow each other in id order, i.e. the result looks like N iterations of the same step.
#pragma once

#include <cstdint>
#include <string>

namespace opf::chakra {

struct ScaleStats {
  size_t input_nodes = 0, root_nodes = 0, output_nodes = 0;
};

// Writes OUT (atomically; ".gz" => gzip). Throws InputError on a bad input trace.
ScaleStats scale_host_et(const std::string& in_path, const std::string& out_path, int64_t times);

bool is_et_root_name(std::string_view name);

}  // namespace opf::chakra
