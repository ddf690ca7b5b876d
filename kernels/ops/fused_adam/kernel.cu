// fused_adam — GPU kernels, one text for CUDA and HIP (see gpu/gpu_compat.cuh), launched through
// the plan below by the generic host launcher (gpu/launch_abi.h, "Lists"; gpu/multi_tensor.cuh).
//
// Contract: ref.cpp. step (grads: list T, params: list T, exp_avg: list f32, exp_avg_sq: list f32,
// noop_flag: i32 [1]); T = f32 | f16 | bf16, f32 math, p rounded once to T.
//   step s0   one block per chunk (OPF_TUNE_CHUNK elements of one tensor): if noop_flag[0] != 0
//             on entry the block returns (nothing written); else every element of the chunk is
//             updated in one pass (16-byte packs when the chunk's pointers allow) and the chunk's
//             "saw a non-finite gradient" bit (a shared flag that only 1s are written to, between
//             two barriers) goes to workspace[chunk]. s0 never writes noop_flag,
//             so every block sees its entry value (apex lets a block see a flag another block of
//             the same launch set; the contract updates every element, so that race is avoided).
//   step s1   one block: if noop_flag[0] is still 0 (the step ran), ORs the chunks' bits in a
//             fixed order and sets noop_flag[0] = 1 if any is set. It never writes 0.
// Arithmetic as cpu.cpp: explicit fmaf where it fuses, every other operation rounded in f32. The
// f32 factors are computed from the double params exactly as the CPU module does on its host.
// No atomics: results are bitwise reproducible run to run.
#include "gpu/gpu_compat.cuh"
#include "gpu/multi_tensor.cuh"

// Tuning (docs/design.md, principle 6): the manifest's `tune` table arrives as -DOPF_TUNE_<NAME>; the
// JIT may override these. Defaults match kernels/manifest.toml.
#ifndef OPF_TUNE_CHUNK  // elements per chunk = per block of s0
#define OPF_TUNE_CHUNK 65536
#endif
#ifndef OPF_TUNE_BLOCK  // threads per block
#define OPF_TUNE_BLOCK 512
#endif

#if OPF_TUNE_BLOCK > 1024 || OPF_TUNE_BLOCK < 1
#error "OPF_TUNE_BLOCK must be in [1, 1024]"
#endif

extern "C" {
__constant__ opf_gpu_plan fused_adam_step_plan = {
    2,
    OPF_EXTENT_CHUNKS,
    (int)sizeof(int),
    {{OPF_EXTENT_CHUNKS, 1, 1, OPF_TUNE_BLOCK, 0}, {OPF_EXTENT_ONE, 1, 1, OPF_TUNE_BLOCK, 0}},
    OPF_TUNE_CHUNK};
}

namespace {

using namespace opf_gpu;

// Params in manifest order: lr, beta1, beta2, eps, step, weight_decay, adam_w_mode, bias_correction.
struct Factors {
  float b1, omb1, b2, omb2, lr, eps, wd, rbc1, rbc2;
};

OPF_DEVICE Factors factors(const opf_gpu_args& a) {
  const double beta1 = a.param[1], beta2 = a.param[2], t = a.param[4];
  const bool bc = a.param[7] != 0.0;
  Factors f;
  f.b1 = (float)beta1;
  f.omb1 = (float)(1.0 - beta1);
  f.b2 = (float)beta2;
  f.omb2 = (float)(1.0 - beta2);
  f.lr = (float)a.param[0];
  f.eps = (float)a.param[3];
  f.wd = (float)a.param[5];
  f.rbc1 = bc ? (float)(1.0 / (1.0 - pow(beta1, t))) : 1.0f;
  f.rbc2 = bc ? (float)(1.0 / (1.0 - pow(beta2, t))) : 1.0f;
  return f;
}

// One element: g, p in; m, v in and out; returns the new p (f32). bad |= g is NaN or infinite.
template <bool kAdamW>
OPF_DEVICE float update(const Factors& f, float g, float p, float& m, float& v, bool& bad) {
  bad |= !(fabsf(g) <= 3.40282347e+38f);  // NaN compares false
  if (!kAdamW) g = fmaf(f.wd, p, g);
  m = fmaf(f.b1, m, f.omb1 * g);
  v = fmaf(f.b2, v, f.omb2 * (g * g));
  float u = (m * f.rbc1) / (sqrtf(v * f.rbc2) + f.eps);
  if (kAdamW) u = fmaf(f.wd, p, u);
  return fmaf(-f.lr, u, p);
}

template <class T, bool kAdamW>
OPF_DEVICE bool step_chunk(const Factors& f, const ListChunk& c) {
  constexpr int V = Pack<T>::n;  // 4 (f32) or 8 (f16, bf16) elements per 16-byte pack of T
  constexpr int VF = Pack<float>::n;
  const T* g = list_data<T>(c, 0);
  T* p = list_data<T>(c, 1);
  float* m = list_data<float>(c, 2);
  float* v = list_data<float>(c, 3);
  const long long n = c.n;
  bool bad = false;
  long long tail = 0;  // elements [tail, n) go one by one
  if (aligned16(g) && aligned16(p) && aligned16(m) && aligned16(v)) {
    const long long packs = n / V;
    tail = packs * V;
    for (long long k = threadIdx.x; k < packs; k += OPF_TUNE_BLOCK) {
      const long long i = k * V;
      const Pack<T> pg = load_pack(g, i);
      Pack<T> pp = load_pack(p, i);
      Pack<float> pm[V / VF], pv[V / VF];
      for (int h = 0; h < V / VF; ++h) {
        pm[h] = load_pack(m, i + h * VF);
        pv[h] = load_pack(v, i + h * VF);
      }
      for (int e = 0; e < V; ++e)
        from_float(pp.v[e], update<kAdamW>(f, to_float(pg.v[e]), to_float(pp.v[e]), pm[e / VF].v[e % VF],
                                           pv[e / VF].v[e % VF], bad));
      store_pack(p, i, pp);
      for (int h = 0; h < V / VF; ++h) {
        store_pack(m, i + h * VF, pm[h]);
        store_pack(v, i + h * VF, pv[h]);
      }
    }
  }
  for (long long i = tail + threadIdx.x; i < n; i += OPF_TUNE_BLOCK) {
    float mi = m[i], vi = v[i];
    store(p, i, update<kAdamW>(f, load(g, i), load(p, i), mi, vi, bad));
    m[i] = mi;
    v[i] = vi;
  }
  return bad;
}

template <class T>
__device__ void step(const opf_gpu_args& a) {
  if (static_cast<const int*>(a.ptr[4])[0] != 0) return;  // skipped: the whole grid returns
  __shared__ int chunk_bad;  // every writer stores 1: the same result in any order, no atomics
  if (threadIdx.x == 0) chunk_bad = 0;
  __syncthreads();
  const ListChunk c = list_chunk(a, blockIdx.x);
  const Factors f = factors(a);
  const bool bad = a.param[6] != 0.0 ? step_chunk<T, true>(f, c) : step_chunk<T, false>(f, c);
  if (bad) chunk_bad = 1;
  __syncthreads();
  if (threadIdx.x == 0) static_cast<int*>(a.workspace)[blockIdx.x] = chunk_bad;
}

__device__ void step_flag(const opf_gpu_args& a) {
  int* flag = static_cast<int*>(a.ptr[4]);
  if (flag[0] != 0) return;  // skipped (s0 wrote nothing, the workspace is not valid)
  const long long nchunks = a.cols;
  const int* ws = static_cast<const int*>(a.workspace);
  bool any = false;
  for (long long c = threadIdx.x; c < nchunks; c += OPF_TUNE_BLOCK) any |= ws[c] != 0;
  const float nbad = block_sum<OPF_TUNE_BLOCK>(any ? 1.0f : 0.0f);
  if (threadIdx.x == 0 && nbad > 0.0f) flag[0] = 1;
}

}  // namespace

#define OPF_FUSED_ADAM_KERNELS(SUFFIX, T)                                                                    \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) fused_adam_step_##SUFFIX(opf_gpu_args a) { step<T>(a); } \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) fused_adam_step_##SUFFIX##_s1(opf_gpu_args a) { step_flag(a); }

OPF_FUSED_ADAM_KERNELS(f32, float)
OPF_FUSED_ADAM_KERNELS(f16, opf_gpu::f16)
OPF_FUSED_ADAM_KERNELS(bf16, opf_gpu::bf16)
