// Multi-tensor apply on the device: the kernels of entries with `list` arguments (optimizers,
// multi_tensor) read the chunk table the launcher uploads (gpu/launch_abi.h, "Lists"). A stage
// whose plan extent is CHUNKS runs one block per chunk; one whose extent is TENSORS one block per
// tensor (e.g. to combine the per-chunk partials of a reduction in a fixed order).
#pragma once

#include "gpu/gpu_compat.cuh"

namespace opf_gpu {

// The piece of tensor `tensor` that chunk c covers: elements [begin, begin + n).
struct ListChunk {
  const opf_gpu_list_tensor* t;
  long long tensor;
  long long begin;
  long long n;
};

OPF_DEVICE ListChunk list_chunk(const opf_gpu_args& a, long long c) {
  const opf_gpu_lists& l = *a.lists;
  ListChunk r;
  r.tensor = l.chunk_tensor[c];
  r.t = &l.tensor[r.tensor];
  r.begin = (c - r.t->first_chunk) * l.chunk;
  const long long left = r.t->numel - r.begin;
  r.n = left < l.chunk ? left : l.chunk;
  return r;
}

// List j's data for the chunk, at the chunk's first element, as storage type S.
template <class S>
OPF_DEVICE S* list_data(const ListChunk& c, int list) {
  return static_cast<S*>(c.t->ptr[list]) + c.begin;
}

// The chunks of tensor k: [first, first + count).
OPF_DEVICE long long tensor_chunks(const opf_gpu_args& a, long long k, long long* first) {
  const opf_gpu_lists& l = *a.lists;
  *first = l.tensor[k].first_chunk;
  return (l.tensor[k].numel + l.chunk - 1) / l.chunk;
}

// opf_dtype codes (opforge/abi.h), for lists whose dtype a kernel dispatches on at run time.
enum ListDtype { kListF32 = 0, kListF16 = 1, kListBF16 = 2 };

}  // namespace opf_gpu
