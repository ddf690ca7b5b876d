// fused_sgd — GPU kernels, one text for CUDA and HIP (see gpu/gpu_compat.cuh), launched through
// the plans below by the generic host launcher (gpu/launch_abi.h, "Lists").
//
// Contract: ref.cpp. apex multi_tensor_sgd over lists of tensors; T = f32 | f16 | bf16 storage,
// momentum buffers f32, math f32.
//   step            lists grads (T), params (T), momentum_buffer (f32); noop_flag = argument 3.
//   step_with_copy  lists grads (T), params (f32 masters), momentum_buffer (f32), model_copy (T);
//                   noop_flag = argument 4.
// One stage, one block per chunk (extent CHUNKS): the update is elementwise, so no block depends
// on another and the result does not depend on scheduling. The flag is only read (as apex's SGD
// kernel; nothing in this op sets it), so every block sees the value it had on entry.
// Every element is read once and written once: g, p, b (unless no momentum, or first run) in,
// p, b (unless no momentum), copy out. Chunks whose pointers are 16-byte aligned move in 16-byte
// packs (Pack<T>::n elements per thread and step; f32 lists in as many 4-float packs), their
// last n % Pack<T>::n elements one per thread; other chunks element by element. The arithmetic
// is the same in both paths (fused multiply-adds exactly where cpu.cpp has them), so an element's
// result does not depend on where its chunk starts.
#include "gpu/multi_tensor.cuh"

// Tuning (docs/design.md, principle 6): the manifest's `tune` table arrives as -DOPF_TUNE_<NAME>.
// Defaults match kernels/manifest.toml.
#ifndef OPF_TUNE_CHUNK  // elements per chunk = per block (shared with cpu.cpp's task size)
#define OPF_TUNE_CHUNK 65536
#endif
#ifndef OPF_TUNE_BLOCK  // threads per block
#define OPF_TUNE_BLOCK 512
#endif

#if OPF_TUNE_BLOCK > 1024 || OPF_TUNE_BLOCK < 1
#error "OPF_TUNE_BLOCK must be in [1, 1024]"
#endif

extern "C" {
__constant__ opf_gpu_plan fused_sgd_step_plan = {
    1, OPF_EXTENT_ONE, 0, {{OPF_EXTENT_CHUNKS, 1, 1, OPF_TUNE_BLOCK, 0}}, OPF_TUNE_CHUNK};
__constant__ opf_gpu_plan fused_sgd_step_with_copy_plan = {
    1, OPF_EXTENT_ONE, 0, {{OPF_EXTENT_CHUNKS, 1, 1, OPF_TUNE_BLOCK, 0}}, OPF_TUNE_CHUNK};
}

namespace {

using namespace opf_gpu;

// The per-call factors (ref.cpp: f32 values of the double params) and which terms apply.
struct Factors {
  float lr, mu, omd, wd, scale;
  bool wd_before, wd_after, nesterov, first_run;
};

OPF_DEVICE Factors factors(const opf_gpu_args& a) {
  Factors f;
  f.lr = (float)a.param[0];
  f.mu = (float)a.param[1];
  f.omd = (float)(1.0 - a.param[2]);  // 1 - dampening in double, then rounded
  f.nesterov = a.param[3] != 0.0;
  f.wd = (float)a.param[4];
  const bool after = a.param[5] != 0.0;
  f.first_run = a.param[6] != 0.0;
  f.scale = (float)a.param[7];
  f.wd_before = f.wd != 0.0f && !after;
  f.wd_after = f.wd != 0.0f && after;
  return f;
}

// One element: returns the new p; with kMomentum, b (the buffer) is updated (and only read when
// not the first run). As cpu.cpp's Update: g*scale, then MulAdd / NegMulAdd as fmaf.
template <bool kMomentum>
OPF_DEVICE float update(const Factors& f, float g, float p, float& b) {
  g = g * f.scale;
  if (f.wd_before) g = fmaf(f.wd, p, g);
  if (kMomentum) {
    b = f.first_run ? g : fmaf(f.mu, b, f.omd * g);
    g = f.nesterov ? fmaf(f.mu, b, g) : b;
  }
  if (f.wd_after) g = fmaf(f.wd, p, g);
  return fmaf(-f.lr, g, p);
}

// V consecutive elements i .. i + V - 1 as floats, through 16-byte packs of S (V a multiple of
// Pack<S>::n; the pointer 16-byte aligned and i a multiple of V).
template <int V, class S>
OPF_DEVICE void load_v(const S* p, long long i, float (&out)[V]) {
  constexpr int n = Pack<S>::n;
  static_assert(V % n == 0, "V must be a multiple of the pack size");
  for (int q = 0; q < V; q += n) {
    const Pack<S> pk = load_pack(p, i + q);
    for (int e = 0; e < n; ++e) out[q + e] = to_float(pk.v[e]);
  }
}
template <int V, class S>
OPF_DEVICE void store_v(S* p, long long i, const float (&in)[V]) {
  constexpr int n = Pack<S>::n;
  static_assert(V % n == 0, "V must be a multiple of the pack size");
  for (int q = 0; q < V; q += n) {
    Pack<S> pk;
    for (int e = 0; e < n; ++e) from_float(pk.v[e], in[q + e]);
    store_pack(p, i + q, pk);
  }
}

// The chunk of block blockIdx.x. T: grads (and model copy) storage; P: params storage (T, or f32
// with the copy); kCopy: step_with_copy (list 3 = model_copy in T).
template <class T, class P, bool kCopy, bool kMomentum>
__device__ void sgd_chunk(const opf_gpu_args& a, const Factors& f) {
  constexpr int V = Pack<T>::n;  // 4 (f32) or 8 (f16, bf16): a multiple of Pack<float>::n
  const ListChunk c = list_chunk(a, blockIdx.x);
  const T* g = list_data<const T>(c, 0);
  P* p = list_data<P>(c, 1);
  float* b = kMomentum ? list_data<float>(c, 2) : nullptr;
  T* y = kCopy ? list_data<T>(c, 3) : nullptr;
  const long long n = c.n;
  const bool read_b = kMomentum && !f.first_run;
  const bool packed = aligned16(g) && aligned16(p) && (!kMomentum || aligned16(b)) && (!kCopy || aligned16(y));
  const long long nv = packed ? n / V * V : 0;  // elements moved in packs

  for (long long i = (long long)threadIdx.x * V; i < nv; i += (long long)OPF_TUNE_BLOCK * V) {
    float gv[V], pv[V], bv[V];
    load_v<V>(g, i, gv);
    load_v<V>(p, i, pv);
    if (read_b) {
      load_v<V>(b, i, bv);
    } else {
      for (int e = 0; e < V; ++e) bv[e] = 0.0f;
    }
    for (int e = 0; e < V; ++e) pv[e] = update<kMomentum>(f, gv[e], pv[e], bv[e]);
    store_v<V>(p, i, pv);
    if (kMomentum) store_v<V>(b, i, bv);
    if (kCopy) store_v<V>(y, i, pv);
  }
  for (long long i = nv + threadIdx.x; i < n; i += OPF_TUNE_BLOCK) {
    float bv = read_b ? b[i] : 0.0f;
    const float pv = update<kMomentum>(f, load(g, i), load(p, i), bv);
    store(p, i, pv);
    if (kMomentum) b[i] = bv;
    if (kCopy) store(y, i, pv);
  }
}

// noop_flag is argument `flag_arg`: a step with the flag set writes nothing.
template <class T, class P, bool kCopy>
__device__ void sgd(const opf_gpu_args& a, int flag_arg) {
  if (*static_cast<const int*>(a.ptr[flag_arg]) != 0) return;
  const Factors f = factors(a);
  if (f.mu != 0.0f) {
    sgd_chunk<T, P, kCopy, true>(a, f);
  } else {  // no momentum: the buffer is neither read nor written
    sgd_chunk<T, P, kCopy, false>(a, f);
  }
}

}  // namespace

#define OPF_FUSED_SGD_KERNELS(SUFFIX, T)                                                                \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) fused_sgd_step_##SUFFIX(opf_gpu_args a) {           \
    sgd<T, T, false>(a, 3);                                                                             \
  }                                                                                                     \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) fused_sgd_step_with_copy_##SUFFIX(opf_gpu_args a) { \
    sgd<T, float, true>(a, 4);                                                                          \
  }

OPF_FUSED_SGD_KERNELS(f32, float)
OPF_FUSED_SGD_KERNELS(f16, opf_gpu::f16)
OPF_FUSED_SGD_KERNELS(bf16, opf_gpu::bf16)
