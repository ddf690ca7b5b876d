// multi_tensor — GPU kernels (CUDA and HIP; contract: ref.cpp). Multi-tensor apply: the generic
// launcher cuts every tensor of the lists into chunks of OPF_TUNE_CHUNK elements and runs one
// block per chunk (gpu/multi_tensor.cuh), so a list of a thousand tensors is one launch.
//   scale, axpby: one stage, elementwise over the block's chunk; a non-finite checked input sets
//     noop_flag (every writer stores 1: no atomics needed, the result is the same in any order).
//   l2norm: stage 0 sums each chunk's squares in f32 into the workspace (one float per chunk) and
//     flags a non-finite chunk sum; stage 1 (one block) adds the chunk sums in f64, per tensor in
//     chunk order and the tensors in list order, as the reference: the same bits every run.
// Out lists are T here (the launcher checks the manifest's rules): the CPU module's mixed-dtype out
// (f16 in, f32 out) has no GPU kernel yet.
#include "gpu/multi_tensor.cuh"

#ifndef OPF_TUNE_CHUNK
#define OPF_TUNE_CHUNK 65536
#endif
#ifndef OPF_TUNE_BLOCK
#define OPF_TUNE_BLOCK 256
#endif
#ifndef OPF_TUNE_NORM_BLOCK
#define OPF_TUNE_NORM_BLOCK 256
#endif

__constant__ opf_gpu_plan multi_tensor_scale_plan = {
    1, OPF_EXTENT_ONE, 0, {{OPF_EXTENT_CHUNKS, 1, 1, OPF_TUNE_BLOCK, 0}}, OPF_TUNE_CHUNK};
__constant__ opf_gpu_plan multi_tensor_axpby_plan = {
    1, OPF_EXTENT_ONE, 0, {{OPF_EXTENT_CHUNKS, 1, 1, OPF_TUNE_BLOCK, 0}}, OPF_TUNE_CHUNK};
__constant__ opf_gpu_plan multi_tensor_l2norm_plan = {
    2,
    OPF_EXTENT_CHUNKS,
    (int)sizeof(float),
    {{OPF_EXTENT_CHUNKS, 1, 1, OPF_TUNE_BLOCK, 0}, {OPF_EXTENT_ONE, 1, 1, OPF_TUNE_NORM_BLOCK, 0}},
    OPF_TUNE_CHUNK};

namespace {

using namespace opf_gpu;

OPF_DEVICE bool finite(float v) { return fabsf(v) <= 3.40282347e+38f; }  // false for NaN and +-inf

// out = in * s (scale) or a*x + b*y (axpby) over one chunk; returns through *flag when a checked
// input is not finite.
template <class T, bool kAxpby>
__device__ void elementwise(const opf_gpu_args& a) {
  const ListChunk c = list_chunk(a, blockIdx.x);
  const T* x = list_data<const T>(c, 0);
  const T* y = kAxpby ? list_data<const T>(c, 1) : nullptr;
  T* out = list_data<T>(c, kAxpby ? 2 : 1);
  const float s = float(a.param[0]), fa = float(a.param[1]), fb = float(a.param[2]);
  const int check = int(a.param[3]);  // choice index: 0 = both (apex -1), 1 = x, 2 = y
  const bool cx = !kAxpby || check != 2, cy = kAxpby && check != 1;
  bool bad = false;
  for (long long i = threadIdx.x; i < c.n; i += OPF_TUNE_BLOCK) {
    const float xv = load(x, i);
    float r;
    if (kAxpby) {
      const float yv = load(y, i);
      bad |= (cx && !finite(xv)) || (cy && !finite(yv));
      r = fa * xv + fb * yv;
    } else {
      bad |= !finite(xv);
      r = xv * s;
    }
    store(out, i, r);
  }
  if (bad) *static_cast<int*>(a.ptr[kAxpby ? 3 : 2]) = 1;
}

template <class T>
__device__ void chunk_sumsq(const opf_gpu_args& a) {
  const ListChunk c = list_chunk(a, blockIdx.x);
  const T* x = list_data<const T>(c, 0);
  float acc = 0.0f;
  for (long long i = threadIdx.x; i < c.n; i += OPF_TUNE_BLOCK) {
    const float v = load(x, i);
    acc += v * v;
  }
  acc = block_sum<OPF_TUNE_BLOCK>(acc);
  if (threadIdx.x == 0) {
    static_cast<float*>(a.workspace)[blockIdx.x] = acc;
    if (!finite(acc)) *static_cast<int*>(a.ptr[3]) = 1;
  }
}

// One block: each thread adds the chunk sums of a contiguous run of tensors (f64, chunk order),
// writes their norms, and thread 0 adds the threads' partials in thread order: tensors in list order.
__device__ void norms(const opf_gpu_args& a) {
  __shared__ double partial[OPF_TUNE_NORM_BLOCK];
  const long long n = a.lists->ntensors;
  const float* sums = static_cast<const float*>(a.workspace);
  float* per_tensor = static_cast<float*>(a.ptr[2]);
  const bool write_each = a.param[4] != 0.0 && a.arg_shape[2][0] == n;
  const long long per = (n + OPF_TUNE_NORM_BLOCK - 1) / OPF_TUNE_NORM_BLOCK;
  const long long k0 = threadIdx.x * per, k1 = k0 + per < n ? k0 + per : n;
  double mine = 0.0;
  for (long long k = k0; k < k1; ++k) {
    long long first;
    const long long count = tensor_chunks(a, k, &first);
    double t = 0.0;
    for (long long j = 0; j < count; ++j) t += double(sums[first + j]);
    if (write_each) per_tensor[k] = float(sqrt(t));
    mine += t;
  }
  partial[threadIdx.x] = mine;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int i = 0; i < OPF_TUNE_NORM_BLOCK; ++i) total += partial[i];
    *static_cast<float*>(a.ptr[1]) = float(sqrt(total));
  }
}

}  // namespace

#define OPF_MULTI_TENSOR_KERNELS(T, NAME)                                                                             \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) multi_tensor_scale_##NAME(opf_gpu_args a) {                       \
    elementwise<T, false>(a);                                                                                         \
  }                                                                                                                   \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) multi_tensor_axpby_##NAME(opf_gpu_args a) {                       \
    elementwise<T, true>(a);                                                                                          \
  }                                                                                                                   \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) multi_tensor_l2norm_##NAME(opf_gpu_args a) { chunk_sumsq<T>(a); } \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_NORM_BLOCK) multi_tensor_l2norm_##NAME##_s1(opf_gpu_args a) { norms(a); }

OPF_MULTI_TENSOR_KERNELS(float, f32)
OPF_MULTI_TENSOR_KERNELS(opf_gpu::f16, f16)
OPF_MULTI_TENSOR_KERNELS(opf_gpu::bf16, bf16)
