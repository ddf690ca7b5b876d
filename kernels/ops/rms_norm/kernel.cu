// rms_norm — GPU kernels, one text for CUDA and HIP (see gpu/gpu_compat.cuh), launched through
// the plans below by the generic host launcher (gpu/launch_abi.h).
//
// Contract: ref.cpp. forward (x, gamma) -> (y, rstd); backward (dy, x, rstd, gamma) -> (dx, dgamma).
// Storage T = f32 | f16 | bf16, rstd f32, accumulation f32.
//   forward        one block per row: sum of squares over the block, rstd = 1/sqrt(ms + eps), then
//                  y = x * rstd * gamma, rounded once to T.
//   backward s0    one block per row: dx = rstd * (g - xhat * sum_k(g xhat) / cols), g = gamma*dy,
//                  xhat = x*rstd, with the saved rstd as given.
//   backward s1    dgamma partial column sums: block (column tile, row chunk) writes PARTIALS
//                  partial rows into the workspace (f32).
//   backward s2    final column pass over the PARTIALS partials, in fixed order.
// No atomics anywhere: results are bitwise reproducible run to run.
//
// Memory traffic: a packed row (16-byte aligned, length a multiple of the pack) keeps its first
// CACHE_PACKS packs per thread in registers between the reduction and the output pass, so rows of
// up to BLOCK * CACHE_PACKS * Pack<T>::n elements (4096 f32, 8192 f16/bf16 with the defaults) are
// read from memory once; a longer row's remainder and unpacked rows are read again (from cache).
#include "gpu/gpu_compat.cuh"

// Tuning (docs/design.md, principle 6): the manifest's `tune` table arrives as -DOPF_TUNE_<NAME>; the
// JIT may override these. Defaults match kernels/manifest.toml.
#ifndef OPF_TUNE_BLOCK
#define OPF_TUNE_BLOCK 256
#endif
#ifndef OPF_TUNE_CACHE_PACKS  // 16-byte packs of a row each thread holds in registers
#define OPF_TUNE_CACHE_PACKS 4
#endif
#ifndef OPF_TUNE_COL_TILE  // columns per block in the dgamma partial pass
#define OPF_TUNE_COL_TILE 32
#endif
#ifndef OPF_TUNE_PARTIALS  // row chunks of the two-stage column reduction
#define OPF_TUNE_PARTIALS 16
#endif

#if OPF_TUNE_BLOCK % 64 != 0 || OPF_TUNE_BLOCK > 1024
#error "OPF_TUNE_BLOCK must be a multiple of 64 (whole wavefronts) and at most 1024"
#endif
#if OPF_TUNE_BLOCK % OPF_TUNE_COL_TILE != 0
#error "OPF_TUNE_BLOCK must be a multiple of OPF_TUNE_COL_TILE"
#endif
#if OPF_TUNE_CACHE_PACKS < 1 || OPF_TUNE_PARTIALS < 1
#error "OPF_TUNE_CACHE_PACKS and OPF_TUNE_PARTIALS must be at least 1"
#endif

// Full unrolling keeps the register cache in registers (constant indices); the host emulation's
// compiler does not know the pragma.
#if defined(__CUDACC__) || defined(__HIPCC__) || defined(__HIPCC_RTC__)
#define OPF_RMS_UNROLL _Pragma("unroll")
#else
#define OPF_RMS_UNROLL
#endif

extern "C" {
__constant__ opf_gpu_plan rms_norm_forward_plan = {1, OPF_EXTENT_ONE, 0, {{OPF_EXTENT_ROWS, 1, 1, OPF_TUNE_BLOCK, 0}}};
__constant__ opf_gpu_plan rms_norm_backward_plan = {
    3,
    OPF_EXTENT_COLS,
    OPF_TUNE_PARTIALS*(int)sizeof(float),
    {{OPF_EXTENT_ROWS, 1, 1, OPF_TUNE_BLOCK, 0},
     {OPF_EXTENT_COLS, OPF_TUNE_COL_TILE, OPF_TUNE_PARTIALS, OPF_TUNE_BLOCK, 0},
     {OPF_EXTENT_COLS, OPF_TUNE_BLOCK, 1, OPF_TUNE_BLOCK, 0}}};
}

namespace {

using namespace opf_gpu;

constexpr int kCache = OPF_TUNE_CACHE_PACKS;

template <class T>
__device__ void forward(const opf_gpu_args& a) {
  constexpr int V = Pack<T>::n, kStride = OPF_TUNE_BLOCK * V;
  const long long row = blockIdx.x;
  const int cols = (int)a.cols;
  const float eps = (float)a.param[0];
  const T* x = static_cast<const T*>(a.ptr[0]) + row * cols;
  const T* gamma = static_cast<const T*>(a.ptr[1]);
  T* y = static_cast<T*>(a.ptr[2]) + row * cols;
  const bool packed = cols % V == 0 && aligned16(a.ptr[0]) && aligned16(gamma) && aligned16(a.ptr[2]);

  float sq = 0.0f;
  Pack<T> cx[kCache] = {};
  if (packed) {
    const int k0 = threadIdx.x * V;
    OPF_RMS_UNROLL
    for (int c = 0; c < kCache; ++c) {
      const int k = k0 + c * kStride;
      if (k < cols) {
        cx[c] = load_pack(x, k);
        for (int e = 0; e < V; ++e) {
          const float v = to_float(cx[c].v[e]);
          sq += v * v;
        }
      }
    }
    for (int k = k0 + kCache * kStride; k < cols; k += kStride) {
      const Pack<T> px = load_pack(x, k);
      for (int e = 0; e < V; ++e) {
        const float v = to_float(px.v[e]);
        sq += v * v;
      }
    }
  } else {
    for (int j = threadIdx.x; j < cols; j += OPF_TUNE_BLOCK) {
      const float v = load(x, j);
      sq += v * v;
    }
  }
  sq = block_sum<OPF_TUNE_BLOCK>(sq);
  const float r = opf_gpu::rsqrt(sq / (float)cols + eps);

  if (packed) {
    const int k0 = threadIdx.x * V;
    auto out = [&](const Pack<T>& px, int k) {
      const Pack<T> pg = load_pack(gamma, k);
      Pack<T> py;
      for (int e = 0; e < V; ++e) from_float(py.v[e], to_float(px.v[e]) * r * to_float(pg.v[e]));
      store_pack(y, k, py);
    };
    OPF_RMS_UNROLL
    for (int c = 0; c < kCache; ++c) {
      const int k = k0 + c * kStride;
      if (k < cols) out(cx[c], k);
    }
    for (int k = k0 + kCache * kStride; k < cols; k += kStride) out(load_pack(x, k), k);
  } else {
    for (int j = threadIdx.x; j < cols; j += OPF_TUNE_BLOCK) store(y, j, load(x, j) * r * load(gamma, j));
  }
  if (threadIdx.x == 0) static_cast<float*>(a.ptr[3])[row] = r;
}

template <class T>
__device__ void backward_dx(const opf_gpu_args& a) {
  constexpr int V = Pack<T>::n, kStride = OPF_TUNE_BLOCK * V;
  const long long row = blockIdx.x;
  const int cols = (int)a.cols;
  const T* dy = static_cast<const T*>(a.ptr[0]) + row * cols;
  const T* x = static_cast<const T*>(a.ptr[1]) + row * cols;
  const float r = static_cast<const float*>(a.ptr[2])[row];
  const T* gamma = static_cast<const T*>(a.ptr[3]);
  T* dx = static_cast<T*>(a.ptr[4]) + row * cols;
  const bool packed =
      cols % V == 0 && aligned16(a.ptr[0]) && aligned16(a.ptr[1]) && aligned16(gamma) && aligned16(a.ptr[4]);

  float sum_gx = 0.0f;  // sum_k gamma_k dy_k xhat_k
  Pack<T> cdy[kCache] = {}, cx[kCache] = {};
  auto accumulate = [&](const Pack<T>& pdy, const Pack<T>& px, int k) {
    const Pack<T> pg = load_pack(gamma, k);
    for (int e = 0; e < V; ++e) sum_gx += to_float(pg.v[e]) * to_float(pdy.v[e]) * (to_float(px.v[e]) * r);
  };
  if (packed) {
    const int k0 = threadIdx.x * V;
    OPF_RMS_UNROLL
    for (int c = 0; c < kCache; ++c) {
      const int k = k0 + c * kStride;
      if (k < cols) {
        cdy[c] = load_pack(dy, k);
        cx[c] = load_pack(x, k);
        accumulate(cdy[c], cx[c], k);
      }
    }
    for (int k = k0 + kCache * kStride; k < cols; k += kStride) accumulate(load_pack(dy, k), load_pack(x, k), k);
  } else {
    for (int j = threadIdx.x; j < cols; j += OPF_TUNE_BLOCK) sum_gx += load(gamma, j) * load(dy, j) * (load(x, j) * r);
  }
  sum_gx = block_sum<OPF_TUNE_BLOCK>(sum_gx);

  // dx = rstd/cols * (cols*g - xhat*sum_gx) = rstd * (g - xhat * (sum_gx/cols))
  const float c2 = sum_gx / (float)cols;
  auto grad = [&](float dyv, float xv, float gv) { return r * (gv * dyv - (xv * r) * c2); };
  if (packed) {
    const int k0 = threadIdx.x * V;
    auto out = [&](const Pack<T>& pdy, const Pack<T>& px, int k) {
      const Pack<T> pg = load_pack(gamma, k);
      Pack<T> pdx;
      for (int e = 0; e < V; ++e) from_float(pdx.v[e], grad(to_float(pdy.v[e]), to_float(px.v[e]), to_float(pg.v[e])));
      store_pack(dx, k, pdx);
    };
    OPF_RMS_UNROLL
    for (int c = 0; c < kCache; ++c) {
      const int k = k0 + c * kStride;
      if (k < cols) out(cdy[c], cx[c], k);
    }
    for (int k = k0 + kCache * kStride; k < cols; k += kStride) out(load_pack(dy, k), load_pack(x, k), k);
  } else {
    for (int j = threadIdx.x; j < cols; j += OPF_TUNE_BLOCK)
      store(dx, j, grad(load(dy, j), load(x, j), load(gamma, j)));
  }
}

// dgamma partials. Block = COL_TILE columns x LANES row lanes; blockIdx.y picks a contiguous chunk
// of rows; the block's lanes are added in lane order and the chunk's sum goes to workspace row
// blockIdx.y. rows = 0 writes zeros (dgamma = 0).
template <class T>
__device__ void backward_partials(const opf_gpu_args& a) {
  constexpr int kLanes = OPF_TUNE_BLOCK / OPF_TUNE_COL_TILE;
  const long long rows = a.rows, cols = a.cols;
  const int tx = threadIdx.x % OPF_TUNE_COL_TILE, ty = threadIdx.x / OPF_TUNE_COL_TILE;
  const long long col = (long long)blockIdx.x * OPF_TUNE_COL_TILE + tx;
  const long long chunk = (rows + OPF_TUNE_PARTIALS - 1) / OPF_TUNE_PARTIALS;
  const long long r0 = blockIdx.y * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
  const T* dy = static_cast<const T*>(a.ptr[0]);
  const T* x = static_cast<const T*>(a.ptr[1]);
  const float* rstd = static_cast<const float*>(a.ptr[2]);

  float dg = 0.0f;
  if (col < cols)
    for (long long i = r0 + ty; i < r1; i += kLanes)
      dg += load(dy, i * cols + col) * (load(x, i * cols + col) * rstd[i]);
  __shared__ float sg[kLanes][OPF_TUNE_COL_TILE];
  sg[ty][tx] = dg;
  __syncthreads();
  if (ty == 0 && col < cols) {
    for (int k = 1; k < kLanes; ++k) dg += sg[k][tx];
    static_cast<float*>(a.workspace)[blockIdx.y * cols + col] = dg;
  }
}

template <class T>
__device__ void backward_final(const opf_gpu_args& a) {
  const long long cols = a.cols, col = (long long)blockIdx.x * OPF_TUNE_BLOCK + threadIdx.x;
  if (col >= cols) return;
  const float* ws = static_cast<const float*>(a.workspace);
  float dg = 0.0f;
  for (int p = 0; p < OPF_TUNE_PARTIALS; ++p) dg += ws[p * cols + col];
  store(static_cast<T*>(a.ptr[5]), col, dg);
}

}  // namespace

#define OPF_RMS_NORM_KERNELS(SUFFIX, T)                                                                               \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) rms_norm_forward_##SUFFIX(opf_gpu_args a) { forward<T>(a); }      \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) rms_norm_backward_##SUFFIX(opf_gpu_args a) { backward_dx<T>(a); } \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) rms_norm_backward_##SUFFIX##_s1(opf_gpu_args a) {                 \
    backward_partials<T>(a);                                                                                          \
  }                                                                                                                   \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) rms_norm_backward_##SUFFIX##_s2(opf_gpu_args a) {                 \
    backward_final<T>(a);                                                                                             \
  }

OPF_RMS_NORM_KERNELS(f32, float)
OPF_RMS_NORM_KERNELS(f16, opf_gpu::f16)
OPF_RMS_NORM_KERNELS(bf16, opf_gpu::bf16)
