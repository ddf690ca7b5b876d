// Synthetic Kineto trace for a host execution trace, so linkable pairs of any size can be made
// without a GPU (the public corpora have no large linkable pair, docs/chakra.md §5). Every non-root host
// node becomes a cpu_op carrying "Record function id" = "External id" = its rf_id, nested as
// the host tree nests (threads keep their host "tid"); leaf ops that touch CUDA tensors launch
// a kernel (cudaLaunchKernel / cudaMemcpyAsync, NCCL kernels with a "Process Group Name" for
// comm ops) on a stream, with correlation ids and ac2g flows; one ProfilerStep#0 spans it all.
// Timings are random but seeded: the same input and seed give the same bytes.
#pragma once

#include <cstdint>
#include <string>

namespace opf::chakra {

struct SynthStats {
  size_t cpu_ops = 0, launches = 0, gpu_ops = 0, threads = 0;
};

SynthStats synth_kineto(const std::string& host_path, const std::string& out_path, uint64_t seed);

}  // namespace opf::chakra
