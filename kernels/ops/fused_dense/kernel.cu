// fused_dense — GPU kernels, one text for CUDA and HIP (see gpu/gpu_compat.cuh), launched by the
// op's own host launcher (launch.cpp: it sizes the grids and the f32 workspace from the shapes).
//
// Contract: ref.cpp. Shapes [batch, in, hidden, out]; storage T = f32 | f16 | bf16; every GEMM in
// f32 (T operands widened to f32 exactly), epilogues in f32, one rounding to T per output;
// intermediates that are not outputs (the f32 a that the second forward GEMM reads, dH) stay f32
// in the workspace.
//
// The opforge GEMM: C[M, N] = op(A)[M, K] · op(B)[K, N]; A is [M, K] or (AT) [K, M], B is [N, K]
// (BN = false: "x Wᵀ") or [K, N] (BN = true). A block computes one TILE_M x TILE_N output tile:
// the grid is (ceil(M / TILE_M), ceil(N / TILE_N)), TILE_M/4 x TILE_N/4 threads, each with a 4 x 4
// register tile (rows ty + i·TY, columns tx + j·TX: conflict-free shared reads, coalesced stores);
// K is walked in TILE_K slices through static shared tiles (f32). Each output element is one f32
// sum over k in increasing order, the epilogue is applied to the registers before the single
// store. Out-of-range operand elements are loaded as 0 (they only meet other padding or outputs
// that are not stored), no product is skipped, so a NaN reaches every output its formula touches.
// Column sums (dbias, dbias1, dbias2 = Σ over batch of dy or dH) are fused into the GEMM whose A
// is that matrix transposed (dweight = dyᵀ·x): the blocks of column tile 0 also sum their A tile's
// rows over the whole K in fixed order — one block owns each sum, so no atomics, no cross-block
// reduction, bitwise reproducible.
//   linear_bias_forward          s0: y = x·Wᵀ + b
//   linear_bias_backward         s0: dx = dy·W;  s1: dW = dyᵀ·x (+ dbias)
//   linear_gelu_linear_forward   s0: h = x·W1ᵀ + b1 -> h, a = GELU(h) (T), a (f32 workspace)
//                                s1: y = a_f32·W2ᵀ + b2
//   linear_gelu_linear_backward  s0: dW2 = dyᵀ·a (+ dbias2);  s1: dH = (dy·W2) ⊙ GELU'(h) -> workspace
//                                s2: dW1 = dHᵀ·x (+ dbias1);  s3: dx = dH·W1
#include "gpu/gpu_compat.cuh"

// Tuning (docs/design.md, principle 6): the manifest's `tune` arrives as -DOPF_TUNE_<NAME> (the
// CPU module's tile_m/tile_n are its own). Defaults match kernels/manifest.toml.
#ifndef OPF_TUNE_GPU_TILE_M
#define OPF_TUNE_GPU_TILE_M 64
#endif
#ifndef OPF_TUNE_GPU_TILE_N
#define OPF_TUNE_GPU_TILE_N 64
#endif
#ifndef OPF_TUNE_GPU_TILE_K
#define OPF_TUNE_GPU_TILE_K 16
#endif

#define OPF_FD_RM 4  // register tile rows per thread
#define OPF_FD_RN 4  // register tile columns per thread
#define OPF_FD_TX (OPF_TUNE_GPU_TILE_N / OPF_FD_RN)
#define OPF_FD_TY (OPF_TUNE_GPU_TILE_M / OPF_FD_RM)
#define OPF_FD_BLOCK (OPF_FD_TX * OPF_FD_TY)

#if OPF_TUNE_GPU_TILE_M % OPF_FD_RM != 0 || OPF_TUNE_GPU_TILE_N % OPF_FD_RN != 0
#error "gpu_tile_m and gpu_tile_n must be multiples of 4"
#endif
#if OPF_FD_BLOCK > 1024 || OPF_FD_BLOCK < OPF_TUNE_GPU_TILE_M
#error "gpu_tile_m x gpu_tile_n / 16 threads must be in [gpu_tile_m, 1024]"
#endif

namespace {

using namespace opf_gpu;

constexpr int TM = OPF_TUNE_GPU_TILE_M, TN = OPF_TUNE_GPU_TILE_N, TK = OPF_TUNE_GPU_TILE_K;
constexpr int RM = OPF_FD_RM, RN = OPF_FD_RN, TX = OPF_FD_TX, TY = OPF_FD_TY, BLOCK = OPF_FD_BLOCK;

struct Acc {
  float v[RM][RN];
  float colsum;  // thread t < TM: Σ_k A[m0 + t, k] (when asked for)
};

// One output tile's products: acc[i][j] = Σ_k op(A)[m, k] op(B)[k, n] for m = m0 + ty + i·TY,
// n = n0 + tx + j·TX. All threads of the block call it (barriers inside).
template <bool AT, bool BN, class TA, class TB>
__device__ void gemm_tile(const TA* A, const TB* B, long long M, long long N, long long K, long long m0, long long n0,
                          bool colsum, Acc& acc) {
  __shared__ float As[TK][TM + 4];
  __shared__ float Bs[TK][TN + 4];
  const int t = threadIdx.x, tx = t % TX, ty = t / TX;
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RN; ++j) acc.v[i][j] = 0.0f;
  acc.colsum = 0.0f;
  for (long long k0 = 0; k0 < K; k0 += TK) {
    for (int e = t; e < TM * TK; e += BLOCK) {
      // consecutive threads walk A's contiguous dimension
      const int mm = AT ? e % TM : e / TK, kk = AT ? e / TM : e % TK;
      const long long m = m0 + mm, k = k0 + kk;
      float v = 0.0f;
      if (m < M && k < K) v = load(A, AT ? k * M + m : m * K + k);
      As[kk][mm] = v;
    }
    for (int e = t; e < TN * TK; e += BLOCK) {
      const int nn = BN ? e % TN : e / TK, kk = BN ? e / TN : e % TK;
      const long long n = n0 + nn, k = k0 + kk;
      float v = 0.0f;
      if (n < N && k < K) v = load(B, BN ? k * N + n : n * K + k);
      Bs[kk][nn] = v;
    }
    __syncthreads();
    for (int kk = 0; kk < TK; ++kk) {
      float av[RM], bv[RN];
      for (int i = 0; i < RM; ++i) av[i] = As[kk][ty + i * TY];
      for (int j = 0; j < RN; ++j) bv[j] = Bs[kk][tx + j * TX];
      for (int i = 0; i < RM; ++i)
        for (int j = 0; j < RN; ++j) acc.v[i][j] += av[i] * bv[j];
    }
    if (colsum && t < TM)
      for (int kk = 0; kk < TK; ++kk) acc.colsum += As[kk][t];
    __syncthreads();
  }
}

// GELU (tanh form) through a sigmoid, as the CPU module computes it: 0.5 h (1 + tanh z) =
// h s(2z), GELU' = s + 2 h s (1 - s) z', z = √(2/π) (h + 0.044715 h³); s and 1 - s from
// e = exp(-|2z|) without cancellation; h² capped at 2^60 (s is saturated there) so that h³ and z'
// stay finite and 0 · z' is 0, not NaN. A NaN h reaches both results.
struct GeluParts {
  float s, t, h2;
};
OPF_DEVICE GeluParts gelu_parts(float h) {
  float h2 = h * h;
  h2 = h2 < 1152921504606846976.0f ? h2 : 1152921504606846976.0f;
  const float z2 = (2.0f * 0.7978845608f) * (h * (1.0f + 0.044715f * h2));
  const float e = expf(-fabsf(z2));
  const float r = 1.0f / (1.0f + e), er = e * r;
  const bool neg = z2 < 0.0f;
  GeluParts g;
  g.s = neg ? er : r;
  g.t = neg ? r : er;
  g.h2 = h2;
  return g;
}
OPF_DEVICE float gelu(float h) { return h * gelu_parts(h).s; }
OPF_DEVICE float dgelu(float h) {
  const GeluParts g = gelu_parts(h);
  const float dz = 0.7978845608f * (1.0f + (3.0f * 0.044715f) * g.h2);
  return g.s + g.s * g.t * dz * h * 2.0f;
}

// The epilogue loop: f(m, n, value) for every stored element of this thread's register tile.
template <class F>
OPF_DEVICE void for_outputs(const Acc& acc, long long M, long long N, long long m0, long long n0, F f) {
  const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
  for (int i = 0; i < RM; ++i) {
    const long long m = m0 + ty + i * TY;
    if (m >= M) continue;
    for (int j = 0; j < RN; ++j) {
      const long long n = n0 + tx + j * TX;
      if (n < N) f(m, n, acc.v[i][j]);
    }
  }
}

// The fused column sum: block column 0 stores Σ_k A[m, k] for its rows.
template <class T>
OPF_DEVICE void store_colsum(const Acc& acc, T* out, long long M, long long m0) {
  if (blockIdx.y == 0 && threadIdx.x < TM && m0 + threadIdx.x < M) store(out, m0 + threadIdx.x, acc.colsum);
}

// ---- linear_bias: x 0, weight 1, bias 2, y 3 | dy 0, x 1, weight 2, dx 3, dweight 4, dbias 5
template <class T>
__device__ void lb_forward(const opf_gpu_args& a) {
  const long long M = a.arg_shape[0][0], K = a.arg_shape[0][1], N = a.arg_shape[1][0];
  const long long m0 = (long long)blockIdx.x * TM, n0 = (long long)blockIdx.y * TN;
  Acc acc;
  gemm_tile<false, false>(static_cast<const T*>(a.ptr[0]), static_cast<const T*>(a.ptr[1]), M, N, K, m0, n0, false,
                          acc);
  const T* bias = static_cast<const T*>(a.ptr[2]);
  T* y = static_cast<T*>(a.ptr[3]);
  for_outputs(acc, M, N, m0, n0, [&](long long m, long long n, float v) { store(y, m * N + n, v + load(bias, n)); });
}

template <class T>
__device__ void lb_backward_dx(const opf_gpu_args& a) {  // dx [batch, in] = dy [batch, hid] · W [hid, in]
  const long long M = a.arg_shape[1][0], N = a.arg_shape[1][1], K = a.arg_shape[0][1];
  const long long m0 = (long long)blockIdx.x * TM, n0 = (long long)blockIdx.y * TN;
  Acc acc;
  gemm_tile<false, true>(static_cast<const T*>(a.ptr[0]), static_cast<const T*>(a.ptr[2]), M, N, K, m0, n0, false, acc);
  T* dx = static_cast<T*>(a.ptr[3]);
  for_outputs(acc, M, N, m0, n0, [&](long long m, long long n, float v) { store(dx, m * N + n, v); });
}

template <class T>
__device__ void lb_backward_dw(const opf_gpu_args& a) {  // dW [hid, in] = dyᵀ · x, dbias = Σ_rows dy
  const long long M = a.arg_shape[0][1], N = a.arg_shape[1][1], K = a.arg_shape[1][0];
  const long long m0 = (long long)blockIdx.x * TM, n0 = (long long)blockIdx.y * TN;
  Acc acc;
  gemm_tile<true, true>(static_cast<const T*>(a.ptr[0]), static_cast<const T*>(a.ptr[1]), M, N, K, m0, n0,
                        blockIdx.y == 0, acc);
  T* dw = static_cast<T*>(a.ptr[4]);
  for_outputs(acc, M, N, m0, n0, [&](long long m, long long n, float v) { store(dw, m * N + n, v); });
  store_colsum(acc, static_cast<T*>(a.ptr[5]), M, m0);
}

// ---- linear_gelu_linear_forward: x 0, weight1 1, bias1 2, weight2 3, bias2 4, a 5, y 6, h 7
template <class T>
__device__ void lgl_forward_h(const opf_gpu_args& a) {  // h = x·W1ᵀ + b1, a = GELU(h)
  const long long M = a.arg_shape[0][0], K = a.arg_shape[0][1], N = a.arg_shape[1][0];
  const long long m0 = (long long)blockIdx.x * TM, n0 = (long long)blockIdx.y * TN;
  Acc acc;
  gemm_tile<false, false>(static_cast<const T*>(a.ptr[0]), static_cast<const T*>(a.ptr[1]), M, N, K, m0, n0, false,
                          acc);
  const T* b1 = static_cast<const T*>(a.ptr[2]);
  T* act = static_cast<T*>(a.ptr[5]);
  T* h = static_cast<T*>(a.ptr[7]);
  float* act32 = static_cast<float*>(a.workspace);
  for_outputs(acc, M, N, m0, n0, [&](long long m, long long n, float v) {
    const float hv = v + load(b1, n), g = gelu(hv);
    store(h, m * N + n, hv);
    store(act, m * N + n, g);
    act32[m * N + n] = g;
  });
}

template <class T>
__device__ void lgl_forward_y(const opf_gpu_args& a) {  // y = a_f32·W2ᵀ + b2
  const long long M = a.arg_shape[0][0], K = a.arg_shape[1][0], N = a.arg_shape[3][0];
  const long long m0 = (long long)blockIdx.x * TM, n0 = (long long)blockIdx.y * TN;
  Acc acc;
  gemm_tile<false, false>(static_cast<const float*>(a.workspace), static_cast<const T*>(a.ptr[3]), M, N, K, m0, n0,
                          false, acc);
  const T* b2 = static_cast<const T*>(a.ptr[4]);
  T* y = static_cast<T*>(a.ptr[6]);
  for_outputs(acc, M, N, m0, n0, [&](long long m, long long n, float v) { store(y, m * N + n, v + load(b2, n)); });
}

// ---- linear_gelu_linear_backward: dy 0, x 1, h 2, a 3, weight1 4, weight2 5, dx 6, dweight1 7,
//      dbias1 8, dweight2 9, dbias2 10; workspace dH [batch, hid] f32
template <class T>
__device__ void lgl_backward_dw2(const opf_gpu_args& a) {  // dW2 [out, hid] = dyᵀ·a, dbias2 = Σ_rows dy
  const long long M = a.arg_shape[0][1], N = a.arg_shape[2][1], K = a.arg_shape[0][0];
  const long long m0 = (long long)blockIdx.x * TM, n0 = (long long)blockIdx.y * TN;
  Acc acc;
  gemm_tile<true, true>(static_cast<const T*>(a.ptr[0]), static_cast<const T*>(a.ptr[3]), M, N, K, m0, n0,
                        blockIdx.y == 0, acc);
  T* dw2 = static_cast<T*>(a.ptr[9]);
  for_outputs(acc, M, N, m0, n0, [&](long long m, long long n, float v) { store(dw2, m * N + n, v); });
  store_colsum(acc, static_cast<T*>(a.ptr[10]), M, m0);
}

template <class T>
__device__ void lgl_backward_dh(const opf_gpu_args& a) {  // dH [batch, hid] = (dy·W2) ⊙ GELU'(h)
  const long long M = a.arg_shape[0][0], N = a.arg_shape[2][1], K = a.arg_shape[0][1];
  const long long m0 = (long long)blockIdx.x * TM, n0 = (long long)blockIdx.y * TN;
  Acc acc;
  gemm_tile<false, true>(static_cast<const T*>(a.ptr[0]), static_cast<const T*>(a.ptr[5]), M, N, K, m0, n0, false, acc);
  const T* h = static_cast<const T*>(a.ptr[2]);
  float* dh = static_cast<float*>(a.workspace);
  for_outputs(acc, M, N, m0, n0,
              [&](long long m, long long n, float v) { dh[m * N + n] = v * dgelu(load(h, m * N + n)); });
}

template <class T>
__device__ void lgl_backward_dw1(const opf_gpu_args& a) {  // dW1 [hid, in] = dHᵀ·x, dbias1 = Σ_rows dH
  const long long M = a.arg_shape[2][1], N = a.arg_shape[1][1], K = a.arg_shape[1][0];
  const long long m0 = (long long)blockIdx.x * TM, n0 = (long long)blockIdx.y * TN;
  Acc acc;
  gemm_tile<true, true>(static_cast<const float*>(a.workspace), static_cast<const T*>(a.ptr[1]), M, N, K, m0, n0,
                        blockIdx.y == 0, acc);
  T* dw1 = static_cast<T*>(a.ptr[7]);
  for_outputs(acc, M, N, m0, n0, [&](long long m, long long n, float v) { store(dw1, m * N + n, v); });
  store_colsum(acc, static_cast<T*>(a.ptr[8]), M, m0);
}

template <class T>
__device__ void lgl_backward_dx(const opf_gpu_args& a) {  // dx [batch, in] = dH·W1
  const long long M = a.arg_shape[1][0], N = a.arg_shape[1][1], K = a.arg_shape[2][1];
  const long long m0 = (long long)blockIdx.x * TM, n0 = (long long)blockIdx.y * TN;
  Acc acc;
  gemm_tile<false, true>(static_cast<const float*>(a.workspace), static_cast<const T*>(a.ptr[4]), M, N, K, m0, n0,
                         false, acc);
  T* dx = static_cast<T*>(a.ptr[6]);
  for_outputs(acc, M, N, m0, n0, [&](long long m, long long n, float v) { store(dx, m * N + n, v); });
}

}  // namespace

#define OPF_FD_KERNEL(NAME, FN, T) \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_FD_BLOCK) NAME(opf_gpu_args a) { FN<T>(a); }

#define OPF_FUSED_DENSE_KERNELS(SUFFIX, T)                                                  \
  OPF_FD_KERNEL(fused_dense_linear_bias_forward_##SUFFIX, lb_forward, T)                    \
  OPF_FD_KERNEL(fused_dense_linear_bias_backward_##SUFFIX, lb_backward_dx, T)               \
  OPF_FD_KERNEL(fused_dense_linear_bias_backward_##SUFFIX##_s1, lb_backward_dw, T)          \
  OPF_FD_KERNEL(fused_dense_linear_gelu_linear_forward_##SUFFIX, lgl_forward_h, T)          \
  OPF_FD_KERNEL(fused_dense_linear_gelu_linear_forward_##SUFFIX##_s1, lgl_forward_y, T)     \
  OPF_FD_KERNEL(fused_dense_linear_gelu_linear_backward_##SUFFIX, lgl_backward_dw2, T)      \
  OPF_FD_KERNEL(fused_dense_linear_gelu_linear_backward_##SUFFIX##_s1, lgl_backward_dh, T)  \
  OPF_FD_KERNEL(fused_dense_linear_gelu_linear_backward_##SUFFIX##_s2, lgl_backward_dw1, T) \
  OPF_FD_KERNEL(fused_dense_linear_gelu_linear_backward_##SUFFIX##_s3, lgl_backward_dx, T)

OPF_FUSED_DENSE_KERNELS(f32, float)
OPF_FUSED_DENSE_KERNELS(f16, opf_gpu::f16)
OPF_FUSED_DENSE_KERNELS(bf16, opf_gpu::bf16)
