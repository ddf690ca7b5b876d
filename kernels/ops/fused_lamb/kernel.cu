// fused_lamb — GPU kernels, one text for CUDA and HIP (see gpu/gpu_compat.cuh), launched through
// the plan below by the generic host launcher as a multi-tensor apply (gpu/launch_abi.h "Lists",
// gpu/multi_tensor.cuh): every tensor of the four lists is cut into chunks of OPF_TUNE_CHUNK
// elements, numbered in list order.
//
// Contract: ref.cpp. step (grads, params: list T; exp_avg, exp_avg_sq: list f32; noop_flag i32[1]).
// The math forces three passes over memory (as cpu.cpp): the global grad norm must be complete
// before any moment is updated, and a tensor's update norm before any of its params. Five stages;
// the per-chunk ones run SPLIT blocks per chunk (grid y = the chunk's part), so that one large
// tensor still fills the device, each block summing its part in f32:
//   s0  CHUNKS x SPLIT  f32 sum of g^2 over the part -> ws g2[c * SPLIT + y].
//   s1  ONE             one block: per tensor the f64 sum of its partials (in order), then the
//                       total (f64, fixed tree) -> G = f32(sqrt), rclip -> ws; noop_flag[0] = 1
//                       if some partial is non-finite (a NaN/inf gradient), never reset.
//   s2  CHUNKS x SPLIT  m, v, u (u rounded to T, written into grads); with a trust ratio the
//                       part's f32 sums of p^2 and u^2 (u as stored) -> ws p2, u2; without one
//                       (weight_decay 0 and not use_nvlamb) p -= lr*u here, and s3, s4 return.
//   s3  TENSORS         one block per tensor: f64 sums of its partials -> ratio -> ws ratio[first].
//   s4  CHUNKS x SPLIT  p -= ratio[tensor] * u.
// Workspace (f32, nc = number of chunks): g2, p2, u2 [nc * SPLIT], ratio [nc], rclip: (3 SPLIT + 2)
// floats per chunk (nc >= 1 whenever a stage touches it). No atomics: every sum has a fixed
// order, so results are bitwise reproducible run to run. Reads/writes: s0 g; s2 g, p, m, v -> g,
// m, v (p too without trust ratio); s4 u, p -> p: the minimum the math allows.
// f32 factors from double arithmetic, as the host computes them in cpu.cpp / ref.cpp.
#include "gpu/gpu_compat.cuh"
#include "gpu/multi_tensor.cuh"

// Tuning (docs/design.md, principle 6): the manifest's `tune` table arrives as -DOPF_TUNE_<NAME>;
// the JIT may override these. Defaults match kernels/manifest.toml.
#ifndef OPF_TUNE_CHUNK  // elements per chunk (SPLIT blocks of s0, s2, s4)
#define OPF_TUNE_CHUNK 65536
#endif
#ifndef OPF_TUNE_BLOCK  // threads per block, every stage (a power of two: the f64 tree sums)
#define OPF_TUNE_BLOCK 256
#endif
#ifndef OPF_TUNE_SPLIT  // blocks per chunk in s0, s2, s4 (grid y): enough blocks for one large tensor
#define OPF_TUNE_SPLIT 4
#endif

// The step's 11 params (manifest order, enum below) must all reach a.param[].
#if OPF_GPU_MAX_PARAMS < 11
#error "fused_lamb has 11 params: gpu/launch_abi.h's OPF_GPU_MAX_PARAMS must be >= 11"
#endif
#if (OPF_TUNE_BLOCK & (OPF_TUNE_BLOCK - 1)) != 0 || OPF_TUNE_BLOCK > 1024
#error "OPF_TUNE_BLOCK must be a power of two <= 1024"
#endif

extern "C" {
__constant__ opf_gpu_plan fused_lamb_step_plan = {5,
                                                  OPF_EXTENT_CHUNKS,
                                                  (3 * OPF_TUNE_SPLIT + 2) * (int)sizeof(float),
                                                  {{OPF_EXTENT_CHUNKS, 1, OPF_TUNE_SPLIT, OPF_TUNE_BLOCK, 0},
                                                   {OPF_EXTENT_ONE, 1, 1, OPF_TUNE_BLOCK, 0},
                                                   {OPF_EXTENT_CHUNKS, 1, OPF_TUNE_SPLIT, OPF_TUNE_BLOCK, 0},
                                                   {OPF_EXTENT_TENSORS, 1, 1, OPF_TUNE_BLOCK, 0},
                                                   {OPF_EXTENT_CHUNKS, 1, OPF_TUNE_SPLIT, OPF_TUNE_BLOCK, 0}},
                                                  OPF_TUNE_CHUNK};
}

namespace {

using namespace opf_gpu;

// params, manifest order
enum {
  kLr,
  kBeta1,
  kBeta2,
  kEps,
  kStep,
  kWeightDecay,
  kBiasCorrection,
  kAdamWMode,
  kGradAveraging,
  kMaxGradNorm,
  kUseNvlamb
};

OPF_DEVICE bool finite(float v) { return fabsf(v) <= 3.40282347e+38f; }  // false for NaN and +-inf

// The step's f32 factors (ref.cpp: 1 - beta and the bias corrections in double, then rounded).
struct Factors {
  float b1, b3, b2, omb2, lr, eps, wd, mgn, rbc1, rbc2;
  bool adamw, trust;
};

OPF_DEVICE Factors factors(const opf_gpu_args& a) {
  const double beta1 = a.param[kBeta1], beta2 = a.param[kBeta2], t = a.param[kStep];
  const bool bc = a.param[kBiasCorrection] != 0.0;
  Factors f;
  f.b1 = (float)beta1;
  f.b3 = a.param[kGradAveraging] != 0.0 ? (float)(1.0 - beta1) : 1.0f;
  f.b2 = (float)beta2;
  f.omb2 = (float)(1.0 - beta2);
  f.lr = (float)a.param[kLr];
  f.eps = (float)a.param[kEps];
  f.wd = (float)a.param[kWeightDecay];
  f.mgn = (float)a.param[kMaxGradNorm];
  f.rbc1 = bc ? (float)(1.0 / (1.0 - pow(beta1, t))) : 1.0f;
  f.rbc2 = bc ? (float)(1.0 / (1.0 - pow(beta2, t))) : 1.0f;
  f.adamw = a.param[kAdamWMode] != 0.0;
  f.trust = a.param[kWeightDecay] != 0.0 || a.param[kUseNvlamb] != 0.0;
  return f;
}

// Workspace arrays (f32): g2, p2, u2, each [nchunks * SPLIT] (chunk-major: partial c * SPLIT + y),
// ratio [nchunks] (a tensor's at its first chunk), then rclip.
enum { kWsG2, kWsP2, kWsU2, kWsRatio, kWsRclip };
OPF_DEVICE float* ws_array(const opf_gpu_args& a, int which) {
  const long long nc = a.lists->nchunks;
  float* ws = static_cast<float*>(a.workspace);
  return which <= kWsU2 ? ws + which * OPF_TUNE_SPLIT * nc : ws + 3 * OPF_TUNE_SPLIT * nc + (which - kWsRatio) * nc;
}
OPF_DEVICE long long partial_index() { return (long long)blockIdx.x * OPF_TUNE_SPLIT + blockIdx.y; }

// The part of chunk blockIdx.x that block (x, y) covers: elements [off, off + n) of the chunk (n
// may be 0: a small chunk is not split below 16 elements per thread, and its other blocks return
// at once). Parts start at multiples of 8 elements, so 16-byte alignment carries over.
struct Part {
  ListChunk c;
  long long off, n;
};
OPF_DEVICE Part chunk_part(const opf_gpu_args& a) {
  Part r;
  r.c = list_chunk(a, blockIdx.x);
  const long long even = ((r.c.n + OPF_TUNE_SPLIT - 1) / OPF_TUNE_SPLIT + 7) / 8 * 8;
  const long long per = even > 16 * OPF_TUNE_BLOCK ? even : 16 * OPF_TUNE_BLOCK;
  const long long b = (long long)blockIdx.y * per, e = b + per;
  r.off = b < r.c.n ? b : r.c.n;
  r.n = (e < r.c.n ? e : r.c.n) - r.off;
  return r;
}
template <class S>
OPF_DEVICE S* part_data(const Part& p, int list) {
  return list_data<S>(p.c, list) + p.off;
}

// Sums two doubles over the block by a fixed tree (BLOCK a power of two); thread 0 gets them.
OPF_DEVICE void block_sum2_f64(double& x, double& y) {
  __shared__ double sx[OPF_TUNE_BLOCK], sy[OPF_TUNE_BLOCK];
  const int t = threadIdx.x;
  sx[t] = x;
  sy[t] = y;
  __syncthreads();
  for (int s = OPF_TUNE_BLOCK / 2; s > 0; s /= 2) {
    if (t < s) {
      sx[t] += sx[t + s];
      sy[t] += sy[t + s];
    }
    __syncthreads();
  }
  x = sx[0];
  y = sy[0];
}

// V consecutive f32 values at p + i through 16-byte packs (V a multiple of 4, p + i aligned).
template <int V>
OPF_DEVICE void load_f32(const float* p, long long i, float (&out)[V]) {
  for (int q = 0; q < V / 4; ++q) {
    const Pack<float> pk = load_pack(p, i + 4 * q);
    for (int e = 0; e < 4; ++e) out[4 * q + e] = pk.v[e];
  }
}
template <int V>
OPF_DEVICE void store_f32(float* p, long long i, const float (&in)[V]) {
  for (int q = 0; q < V / 4; ++q) {
    Pack<float> pk;
    for (int e = 0; e < 4; ++e) pk.v[e] = in[4 * q + e];
    store_pack(p, i + 4 * q, pk);
  }
}

// s0: the chunk's f32 sum of g^2.
template <class T>
__device__ void grad_norm_partials(const opf_gpu_args& a) {
  constexpr int V = Pack<T>::n;
  const Part c = chunk_part(a);
  if (c.n == 0) {  // uniform over the block: no barrier skipped by part of it
    if (threadIdx.x == 0) ws_array(a, kWsG2)[partial_index()] = 0.0f;
    return;
  }
  const T* g = part_data<T>(c, 0);
  const long long n = c.n;
  float s = 0.0f;
  if (aligned16(g)) {
    for (long long k = (long long)threadIdx.x * V; k + V <= n; k += (long long)OPF_TUNE_BLOCK * V) {
      const Pack<T> pg = load_pack(g, k);
      for (int e = 0; e < V; ++e) {
        const float x = to_float(pg.v[e]);
        s += x * x;
      }
    }
    for (long long j = n / V * V + threadIdx.x; j < n; j += OPF_TUNE_BLOCK) {
      const float x = load(g, j);
      s += x * x;
    }
  } else {
    for (long long j = threadIdx.x; j < n; j += OPF_TUNE_BLOCK) {
      const float x = load(g, j);
      s += x * x;
    }
  }
  s = block_sum<OPF_TUNE_BLOCK>(s);
  if (threadIdx.x == 0) ws_array(a, kWsG2)[partial_index()] = s;
}

// s1: the global norm G (per tensor f64 sums of the chunk partials in chunk order, then the
// total), rclip, and the noop flag.
__device__ void grad_norm_final(const opf_gpu_args& a) {
  if (!a.lists || a.lists->nchunks == 0) return;  // nothing to do: no workspace either
  const long long ntensors = a.lists->ntensors;
  const float* g2 = ws_array(a, kWsG2);
  double total = 0.0, bad = 0.0;
  for (long long k = threadIdx.x; k < ntensors; k += OPF_TUNE_BLOCK) {
    long long first;
    const long long count = tensor_chunks(a, k, &first);
    double s = 0.0;
    for (long long j = first * OPF_TUNE_SPLIT; j < (first + count) * OPF_TUNE_SPLIT; ++j) {
      const float x = g2[j];
      s += (double)x;
      if (!finite(x)) bad = 1.0;
    }
    total += s;
  }
  block_sum2_f64(total, bad);
  if (threadIdx.x == 0) {
    const float mgn = (float)a.param[kMaxGradNorm];
    const float G = (float)sqrt(total);
    // a NaN G compares false (no clipping), an infinite one gives 0 (as apex's g / (G / mgn))
    ws_array(a, kWsRclip)[0] = G > mgn ? (float)((double)mgn / (double)G) : 1.0f;
    if (bad != 0.0) *static_cast<int*>(a.ptr[4]) = 1;
  }
}

// One element of s2: m, v updated; returns u as stored in T (and stores it through ug).
template <class T>
OPF_DEVICE float update(const Factors& f, float rclip, float gv, float pv, float& m, float& v, T& ug) {
  float gc = gv * rclip;
  if (!f.adamw) gc = gc + f.wd * pv;
  m = f.b1 * m + f.b3 * gc;
  v = f.b2 * v + f.omb2 * (gc * gc);
  float u = (m * f.rbc1) / (sqrtf(v * f.rbc2) + f.eps);
  if (f.adamw) u = u + f.wd * pv;
  from_float(ug, u);
  return to_float(ug);
}

// s2: moments and update per chunk; the chunk's p^2, u^2 sums (trust ratio) or p itself (not).
template <class T>
__device__ void moments(const opf_gpu_args& a) {
  constexpr int V = Pack<T>::n;
  const Factors f = factors(a);
  const Part c = chunk_part(a);
  if (c.n == 0) {  // uniform over the block
    if (f.trust && threadIdx.x == 0) ws_array(a, kWsP2)[partial_index()] = ws_array(a, kWsU2)[partial_index()] = 0.0f;
    return;
  }
  T* g = part_data<T>(c, 0);
  T* p = part_data<T>(c, 1);
  float* m = part_data<float>(c, 2);
  float* v = part_data<float>(c, 3);
  const long long n = c.n;
  const float rclip = ws_array(a, kWsRclip)[0];
  float p2 = 0.0f, u2 = 0.0f;
  auto one = [&](long long j) {
    const float pv = load(p, j);
    float mv = m[j], vv = v[j];
    T ug;
    const float u = update(f, rclip, load(g, j), pv, mv, vv, ug);
    m[j] = mv;
    v[j] = vv;
    g[j] = ug;
    if (f.trust) {
      p2 += pv * pv;
      u2 += u * u;
    } else {
      store(p, j, pv - f.lr * u);
    }
  };
  long long tail = 0;
  if (aligned16(g) && aligned16(p) && aligned16(m) && aligned16(v)) {
    for (long long k = (long long)threadIdx.x * V; k + V <= n; k += (long long)OPF_TUNE_BLOCK * V) {
      const Pack<T> pg = load_pack(g, k), pp = load_pack(p, k);
      float mv[V], vv[V];
      load_f32<V>(m, k, mv);
      load_f32<V>(v, k, vv);
      Pack<T> pu, pn;
      for (int e = 0; e < V; ++e) {
        const float pv = to_float(pp.v[e]);
        const float u = update(f, rclip, to_float(pg.v[e]), pv, mv[e], vv[e], pu.v[e]);
        if (f.trust) {
          p2 += pv * pv;
          u2 += u * u;
        } else {
          from_float(pn.v[e], pv - f.lr * u);
        }
      }
      store_f32<V>(m, k, mv);
      store_f32<V>(v, k, vv);
      store_pack(g, k, pu);
      if (!f.trust) store_pack(p, k, pn);
    }
    tail = n / V * V;
  }
  for (long long j = tail + threadIdx.x; j < n; j += OPF_TUNE_BLOCK) one(j);
  if (f.trust) {  // uniform over the block
    block_sum2<OPF_TUNE_BLOCK>(p2, u2);
    if (threadIdx.x == 0) {
      ws_array(a, kWsP2)[partial_index()] = p2;
      ws_array(a, kWsU2)[partial_index()] = u2;
    }
  }
}

// s3: tensor blockIdx.x's trust ratio from its chunks' partials, into ratio[first chunk].
__device__ void trust_ratio(const opf_gpu_args& a) {
  const double wd = a.param[kWeightDecay];
  if (!(wd != 0.0 || a.param[kUseNvlamb] != 0.0)) return;
  long long first;
  const long long count = tensor_chunks(a, blockIdx.x, &first);
  if (count == 0) return;  // an empty tensor: no chunk, nothing to scale
  const float* wp = ws_array(a, kWsP2) + first * OPF_TUNE_SPLIT;
  const float* wu = ws_array(a, kWsU2) + first * OPF_TUNE_SPLIT;
  double p2 = 0.0, u2 = 0.0;
  for (long long j = threadIdx.x; j < count * OPF_TUNE_SPLIT; j += OPF_TUNE_BLOCK) {
    p2 += (double)wp[j];
    u2 += (double)wu[j];
  }
  block_sum2_f64(p2, u2);
  if (threadIdx.x == 0) {
    const float lr = (float)a.param[kLr];
    const float pn = (float)sqrt(p2), un = (float)sqrt(u2);
    // no clamp; a NaN norm compares != 0 and makes the ratio NaN
    ws_array(a, kWsRatio)[first] = pn != 0.0f && un != 0.0f ? lr * (pn / un) : lr;
  }
}

// s4: p -= ratio * u over the chunk.
template <class T>
__device__ void apply(const opf_gpu_args& a) {
  constexpr int V = Pack<T>::n;
  if (!(a.param[kWeightDecay] != 0.0 || a.param[kUseNvlamb] != 0.0)) return;
  const Part c = chunk_part(a);
  const T* u = part_data<T>(c, 0);
  T* p = part_data<T>(c, 1);
  const long long n = c.n;
  const float r = ws_array(a, kWsRatio)[c.c.t->first_chunk];
  long long tail = 0;
  if (aligned16(u) && aligned16(p)) {
    for (long long k = (long long)threadIdx.x * V; k + V <= n; k += (long long)OPF_TUNE_BLOCK * V) {
      const Pack<T> pu = load_pack(u, k), pp = load_pack(p, k);
      Pack<T> pn;
      for (int e = 0; e < V; ++e) from_float(pn.v[e], to_float(pp.v[e]) - r * to_float(pu.v[e]));
      store_pack(p, k, pn);
    }
    tail = n / V * V;
  }
  for (long long j = tail + threadIdx.x; j < n; j += OPF_TUNE_BLOCK) store(p, j, load(p, j) - r * load(u, j));
}

}  // namespace

#define OPF_FUSED_LAMB_KERNELS(SUFFIX, T)                                                                             \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) fused_lamb_step_##SUFFIX(opf_gpu_args a) {                        \
    grad_norm_partials<T>(a);                                                                                         \
  }                                                                                                                   \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) fused_lamb_step_##SUFFIX##_s1(opf_gpu_args a) {                   \
    grad_norm_final(a);                                                                                               \
  }                                                                                                                   \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) fused_lamb_step_##SUFFIX##_s2(opf_gpu_args a) { moments<T>(a); }  \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) fused_lamb_step_##SUFFIX##_s3(opf_gpu_args a) { trust_ratio(a); } \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) fused_lamb_step_##SUFFIX##_s4(opf_gpu_args a) { apply<T>(a); }

OPF_FUSED_LAMB_KERNELS(f32, float)
OPF_FUSED_LAMB_KERNELS(f16, opf_gpu::f16)
OPF_FUSED_LAMB_KERNELS(bf16, opf_gpu::bf16)
