// transducer_joint — GPU kernels, one text for CUDA and HIP (see gpu/gpu_compat.cuh), launched through
// the plans below by the generic host launcher (gpu/launch_abi.h).
//
// Contract: ref.cpp. Shapes [B, T, U, H]: f [B, T, H], g [B, U, H], h [B, T, U, H] or packed [rows, H].
// Storage T = f32 | f16 | bf16, math f32.
//   forward        one block per (b, t) row of f (grid = f's rows): the block walks its U (or g_len[b],
//                  packed) contiguous output rows flat over (u, column), 16-byte packs where H allows;
//                  s = f + g, ReLU, dropout factor, rounded once to T; unpacked don't-care rows -1.
//   backward       fixed grid (GRAD_GRID blocks), grid-stride over every output element of grad_f and
//                  grad_g (packs of columns): each thread sums its column over u (grad_f) or t (grad_g)
//                  in ascending order, f32, one thread per output: no cross-thread reduction at all.
//   dropout_mask   one block per (b, t) row of f: the valid elements of that row are a contiguous
//                  range of the Philox numbering n; a thread draws one Philox4x32-10 block (4 words)
//                  and writes its up-to-4 mask bytes; unpacked don't-care region 0.
// No atomics, no scheduling-dependent order: results are bitwise reproducible.
// Lengths: the CPU path rejects f_len / g_len outside [0, T] / [0, U] (and a wrong packed
// batch_offset) before writing; a kernel cannot fail a call, so it clamps the lengths to stay in
// bounds (the launcher does not check values) and trusts batch_offset when packed.
#include "gpu/gpu_compat.cuh"

// Tuning (docs/design.md, principle 6): the manifest's `tune` table arrives as -DOPF_TUNE_<NAME>; the
// JIT may override these. Defaults match kernels/manifest.toml.
#ifndef OPF_TUNE_BLOCK
#define OPF_TUNE_BLOCK 256
#endif
#ifndef OPF_TUNE_GRAD_GRID  // blocks of the backward's grid-stride pass
#define OPF_TUNE_GRAD_GRID 512
#endif

extern "C" {
__constant__ opf_gpu_plan transducer_joint_forward_plan = {
    1, OPF_EXTENT_ONE, 0, {{OPF_EXTENT_ROWS, 1, 1, OPF_TUNE_BLOCK, 0}}};
__constant__ opf_gpu_plan transducer_joint_backward_plan = {
    1, OPF_EXTENT_ONE, 0, {{OPF_EXTENT_ONE, 1, OPF_TUNE_GRAD_GRID, OPF_TUNE_BLOCK, 0}}};
__constant__ opf_gpu_plan transducer_joint_dropout_mask_plan = {
    1, OPF_EXTENT_ONE, 0, {{OPF_EXTENT_ROWS, 1, 1, OPF_TUNE_BLOCK, 0}}};
}

namespace {

using namespace opf_gpu;

// V consecutive elements as floats: one 16-byte pack when V == Pack<T>::n, else V == 1.
template <class T, int V>
OPF_DEVICE void load_v(const T* p, long long i, float (&out)[V]) {
  if (V > 1) {
    const Pack<T> q = load_pack(p, i);
    for (int e = 0; e < V; ++e) out[e] = to_float(q.v[e]);
  } else {
    out[0] = load(p, i);
  }
}
template <class T, int V>
OPF_DEVICE void store_v(T* p, long long i, const float (&in)[V]) {
  if (V > 1) {
    Pack<T> q;
    for (int e = 0; e < V; ++e) from_float(q.v[e], in[e]);
    store_pack(p, i, q);
  } else {
    store(p, i, in[0]);
  }
}

OPF_DEVICE long long clamp_len(long long v, long long n) { return v < 0 ? 0 : (v > n ? n : v); }

// the dropout factor: 1 / (1 - p) computed in f64, rounded once to f32
OPF_DEVICE float dropout_scale(double p) { return (float)(1.0 / (1.0 - p)); }

// ------------------------------------------------------------------ forward
template <class T, int V>
__device__ void forward_row(const opf_gpu_args& a) {
  const long long nt = a.arg_shape[0][1], nu = a.arg_shape[1][1], nh = a.arg_shape[0][2];
  const long long b = (long long)blockIdx.x / nt, t = (long long)blockIdx.x % nt;
  const T* f = static_cast<const T*>(a.ptr[0]) + (b * nt + t) * nh;
  const T* g = static_cast<const T*>(a.ptr[1]) + b * nu * nh;
  const long long lf = clamp_len(static_cast<const int*>(a.ptr[2])[b], nt);
  const long long lg = clamp_len(static_cast<const int*>(a.ptr[3])[b], nu);
  const bool relu = a.param[0] != 0.0, packed = a.param[1] != 0.0;
  const double p = a.param[2];
  const bool drop = p > 0.0;
  const float scale = drop ? dropout_scale(p) : 1.0f;
  // this block's first output row and how many rows it writes (valid ones first)
  long long r0, nrows, nvalid = t < lf ? lg : 0;
  if (packed) {
    if (t >= lf) return;
    r0 = static_cast<const long long*>(a.ptr[4])[b] - lf * lg + t * lg;
    nrows = lg;
  } else {
    r0 = (b * nt + t) * nu;
    nrows = nu;
  }
  const unsigned char* mask = drop ? static_cast<const unsigned char*>(a.ptr[5]) + r0 * nh : nullptr;
  T* h = static_cast<T*>(a.ptr[6]) + r0 * nh;
  const long long hv = nh / V, total = nrows * hv;
  for (long long j = threadIdx.x; j < total; j += OPF_TUNE_BLOCK) {
    const long long u = j / hv, c = (j % hv) * V, o = u * nh + c;
    float y[V];
    if (u < nvalid) {
      float fv[V], gv[V];
      load_v<T, V>(f, c, fv);
      load_v<T, V>(g, u * nh + c, gv);
      for (int e = 0; e < V; ++e) {
        float s = fv[e] + gv[e];
        if (relu && s < 0.0f) s = 0.0f;
        if (drop) s = s * (mask[o + e] != 0 ? scale : 0.0f);
        y[e] = s;
      }
    } else {
      for (int e = 0; e < V; ++e) y[e] = -1.0f;
    }
    store_v<T, V>(h, o, y);
  }
}

template <class T>
__device__ void forward(const opf_gpu_args& a) {
  constexpr int V = Pack<T>::n;
  if (a.arg_shape[0][2] == 0) return;
  if (a.arg_shape[0][2] % V == 0 && aligned16(a.ptr[0]) && aligned16(a.ptr[1]) && aligned16(a.ptr[6]))
    forward_row<T, V>(a);
  else forward_row<T, 1>(a);
}

// ------------------------------------------------------------------ backward
// Output unit i (V columns): grad_f units first (b, t, column pack), then grad_g units (b, u, pack).
template <class T, int V>
__device__ void backward_units(const opf_gpu_args& a) {
  const long long nb = a.arg_shape[1][0], nt = a.arg_shape[1][1], nu = a.arg_shape[2][1], nh = a.arg_shape[1][2];
  const T* dh = static_cast<const T*>(a.ptr[0]);
  const T* f = static_cast<const T*>(a.ptr[1]);
  const T* g = static_cast<const T*>(a.ptr[2]);
  const int* f_len = static_cast<const int*>(a.ptr[3]);
  const int* g_len = static_cast<const int*>(a.ptr[4]);
  const long long* offset = static_cast<const long long*>(a.ptr[5]);
  const unsigned char* mask = static_cast<const unsigned char*>(a.ptr[6]);
  T* df = static_cast<T*>(a.ptr[7]);
  T* dg = static_cast<T*>(a.ptr[8]);
  const bool relu = a.param[0] != 0.0, packed = a.param[1] != 0.0;
  const double p = a.param[2];
  const bool drop = p > 0.0;
  const float scale = drop ? dropout_scale(p) : 1.0f;
  const long long hv = nh / V, nf = nb * nt * hv, total = nf + nb * nu * hv;
  const long long stride = (long long)gridDim.y * OPF_TUNE_BLOCK;
  for (long long i = (long long)blockIdx.y * OPF_TUNE_BLOCK + threadIdx.x; i < total; i += stride) {
    const bool is_f = i < nf;
    const long long k = is_f ? i : i - nf;  // (b, row, pack) in grad_f's or grad_g's layout
    const long long n_rows = is_f ? nt : nu;
    const long long c = (k % hv) * V, q = k / hv, b = q / n_rows, x0 = q % n_rows;  // x0: t or u
    const long long lf = clamp_len(f_len[b], nt), lg = clamp_len(g_len[b], nu);
    const long long base = packed ? offset[b] - lf * lg : b * nt * nu;  // row of (b, 0, 0)
    // the summed index runs over u (grad_f) or t (grad_g); row(b, t, u) = base + t * ts + u
    const long long ts = packed ? lg : nu;
    const bool live = is_f ? x0 < lf : x0 < lg;
    const long long n_sum = live ? (is_f ? lg : lf) : 0;
    float acc[V], fixed[V];
    for (int e = 0; e < V; ++e) acc[e] = fixed[e] = 0.0f;
    if (relu && n_sum > 0) load_v<T, V>(is_f ? f : g, q * nh + c, fixed);  // f[b,t,:] or g[b,u,:]
    for (long long s = 0; s < n_sum; ++s) {
      const long long row = is_f ? base + x0 * ts + s : base + s * ts + x0;
      float d[V];
      load_v<T, V>(dh, row * nh + c, d);
      if (drop)
        for (int e = 0; e < V; ++e) d[e] = d[e] * (mask[row * nh + c + e] != 0 ? scale : 0.0f);
      if (relu) {
        float other[V];  // g[b,u,:] for grad_f, f[b,t,:] for grad_g
        load_v<T, V>(is_f ? g : f, ((is_f ? b * nu : b * nt) + s) * nh + c, other);
        for (int e = 0; e < V; ++e)
          if (fixed[e] + other[e] <= 0.0f) d[e] = 0.0f;
      }
      for (int e = 0; e < V; ++e) acc[e] += d[e];
    }
    store_v<T, V>(is_f ? df : dg, q * nh + c, acc);
  }
}

template <class T>
__device__ void backward(const opf_gpu_args& a) {
  constexpr int V = Pack<T>::n;
  if (a.arg_shape[1][2] == 0) return;
  if (a.arg_shape[1][2] % V == 0 && aligned16(a.ptr[0]) && aligned16(a.ptr[1]) && aligned16(a.ptr[2]) &&
      aligned16(a.ptr[7]) && aligned16(a.ptr[8]))
    backward_units<T, V>(a);
  else backward_units<T, 1>(a);
}

// ------------------------------------------------------------------ dropout_mask
// Philox4x32-10 of (counter = {lo, hi, 0, 0}, key = {k0, k1}), all four words
OPF_DEVICE void philox(unsigned long long block, unsigned long long key, unsigned (&x)[4]) {
  x[0] = (unsigned)block;
  x[1] = (unsigned)(block >> 32);
  x[2] = 0u;
  x[3] = 0u;
  unsigned k0 = (unsigned)key, k1 = (unsigned)(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const unsigned long long p0 = 0xD2511F53ull * x[0], p1 = 0xCD9E8D57ull * x[2];
    const unsigned y0 = (unsigned)(p1 >> 32) ^ x[1] ^ k0, y1 = (unsigned)p1;
    const unsigned y2 = (unsigned)(p0 >> 32) ^ x[3] ^ k1, y3 = (unsigned)p0;
    x[0] = y0;
    x[1] = y1;
    x[2] = y2;
    x[3] = y3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}

template <class T>
__device__ void dropout_mask(const opf_gpu_args& a) {
  const long long nt = a.arg_shape[0][1], nu = a.arg_shape[1][1], nh = a.arg_shape[0][2];
  const long long b = (long long)blockIdx.x / nt, t = (long long)blockIdx.x % nt;
  const int* f_len = static_cast<const int*>(a.ptr[2]);
  const int* g_len = static_cast<const int*>(a.ptr[3]);
  const bool packed = a.param[1] != 0.0;
  const double keep = (1.0 - a.param[2]) * 4294967296.0;
  const unsigned long long seed = (unsigned long long)a.param[3];
  unsigned char* mask = static_cast<unsigned char*>(a.ptr[5]);

  // P[b] = sum over b' < b of f_len * g_len: per-thread partial sums, then thread 0 in fixed order
  __shared__ long long part[OPF_TUNE_BLOCK];
  __shared__ long long prefix;
  long long sum = 0;
  for (long long i = threadIdx.x; i < b; i += OPF_TUNE_BLOCK) sum += clamp_len(f_len[i], nt) * clamp_len(g_len[i], nu);
  part[threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    long long s = 0;
    for (int i = 0; i < OPF_TUNE_BLOCK; ++i) s += part[i];
    prefix = s;
  }
  __syncthreads();
  const long long lf = clamp_len(f_len[b], nt), lg = clamp_len(g_len[b], nu);
  const long long count = t < lf ? lg * nh : 0;  // this row's valid elements, numbered n_lo ..
  const long long n_lo = (prefix + t * lg) * nh;
  const long long out_lo = packed ? n_lo : (b * nt + t) * nu * nh;
  if (count > 0) {
    const unsigned long long g0 = (unsigned long long)n_lo / 4, g1 = (unsigned long long)(n_lo + count - 1) / 4;
    for (unsigned long long gi = g0 + threadIdx.x; gi <= g1; gi += OPF_TUNE_BLOCK) {
      unsigned w[4];
      philox(gi, seed, w);
      for (int e = 0; e < 4; ++e) {
        const long long n = (long long)(gi * 4 + e);
        if (n >= n_lo && n < n_lo + count) mask[out_lo + (n - n_lo)] = (double)w[e] < keep ? 1 : 0;
      }
    }
  }
  if (!packed)  // the don't-care rest of this (b, t) block of rows
    for (long long j = count + threadIdx.x; j < nu * nh; j += OPF_TUNE_BLOCK) mask[out_lo + j] = 0;
}

}  // namespace

#define OPF_TRANSDUCER_JOINT_KERNELS(SUFFIX, T)                                                              \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) transducer_joint_forward_##SUFFIX(opf_gpu_args a) {      \
    forward<T>(a);                                                                                           \
  }                                                                                                          \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) transducer_joint_backward_##SUFFIX(opf_gpu_args a) {     \
    backward<T>(a);                                                                                          \
  }                                                                                                          \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) transducer_joint_dropout_mask_##SUFFIX(opf_gpu_args a) { \
    dropout_mask<T>(a);                                                                                      \
  }

OPF_TRANSDUCER_JOINT_KERNELS(f32, float)
OPF_TRANSDUCER_JOINT_KERNELS(f16, opf_gpu::f16)
OPF_TRANSDUCER_JOINT_KERNELS(bf16, opf_gpu::bf16)
