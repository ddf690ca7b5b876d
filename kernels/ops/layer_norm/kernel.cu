// layer_norm — GPU kernels, one text for CUDA and HIP (see gpu/gpu_compat.cuh), launched through
// the plans below by the generic host launcher (gpu/launch_abi.h).
//
// Contract: ref.cpp. forward (x, gamma, beta) -> (y, mean, rstd); backward (dy, x, mean, rstd,
// gamma) -> (dx, dgamma, dbeta). Storage T = f32 | f16 | bf16, statistics f32, accumulation f32.
//   forward        one block per row: Welford per thread, Chan merge over the block, then
//                  y = (x - mean) * rstd * gamma + beta, rounded once to T.
//   backward s0    one block per row: dx from the row sums of g = gamma*dy and g*xhat.
//   backward s1    dgamma/dbeta partial column sums: block (column tile, row chunk) writes
//                  PARTIALS partial rows into the workspace (f32).
//   backward s2    final column pass over the PARTIALS partials, in fixed order.
// No atomics anywhere: results are bitwise reproducible run to run.
#include "gpu/gpu_compat.cuh"

// Tuning (docs/design.md, principle 6): the manifest's `tune` table arrives as -DOPF_TUNE_<NAME>; the
// JIT may override these. Defaults match kernels/manifest.toml.
#ifndef OPF_TUNE_BLOCK
#define OPF_TUNE_BLOCK 256
#endif
#ifndef OPF_TUNE_COL_TILE  // columns per block in the dgamma/dbeta partial pass
#define OPF_TUNE_COL_TILE 32
#endif
#ifndef OPF_TUNE_PARTIALS  // row chunks of the two-stage column reduction
#define OPF_TUNE_PARTIALS 16
#endif

#if OPF_TUNE_BLOCK % OPF_TUNE_COL_TILE != 0
#error "OPF_TUNE_BLOCK must be a multiple of OPF_TUNE_COL_TILE"
#endif

extern "C" {
__constant__ opf_gpu_plan layer_norm_forward_plan = {
    1, OPF_EXTENT_ONE, 0, {{OPF_EXTENT_ROWS, 1, 1, OPF_TUNE_BLOCK, 0}}};
__constant__ opf_gpu_plan layer_norm_backward_plan = {
    3,
    OPF_EXTENT_COLS,
    2 * OPF_TUNE_PARTIALS*(int)sizeof(float),
    {{OPF_EXTENT_ROWS, 1, 1, OPF_TUNE_BLOCK, 0},
     {OPF_EXTENT_COLS, OPF_TUNE_COL_TILE, OPF_TUNE_PARTIALS, OPF_TUNE_BLOCK, 0},
     {OPF_EXTENT_COLS, OPF_TUNE_BLOCK, 1, OPF_TUNE_BLOCK, 0}}};
}

namespace {

using namespace opf_gpu;

// Rows whose pointers are 16-byte aligned and whose length is a multiple of Pack<T>::n move in
// 16-byte packs (4 f32 / 8 f16 or bf16 per instruction); the rest element by element.
template <class T>
__device__ void forward(const opf_gpu_args& a) {
  constexpr int V = Pack<T>::n;
  const long long row = blockIdx.x;
  const int cols = (int)a.cols;
  const float eps = (float)a.param[0];
  const T* x = static_cast<const T*>(a.ptr[0]) + row * cols;
  const T* gamma = static_cast<const T*>(a.ptr[1]);
  const T* beta = static_cast<const T*>(a.ptr[2]);
  T* y = static_cast<T*>(a.ptr[3]) + row * cols;
  const bool packed =
      cols % V == 0 && aligned16(a.ptr[0]) && aligned16(gamma) && aligned16(beta) && aligned16(a.ptr[3]);

  Welford w = {0.0f, 0.0f, 0.0f};
  if (packed) {
    for (int k = threadIdx.x * V; k < cols; k += OPF_TUNE_BLOCK * V) {
      const Pack<T> px = load_pack(x, k);
      for (int e = 0; e < V; ++e) w = welford_push(w, to_float(px.v[e]));
    }
  } else {
    for (int j = threadIdx.x; j < cols; j += OPF_TUNE_BLOCK) w = welford_push(w, load(x, j));
  }
  w = block_welford<OPF_TUNE_BLOCK>(w);
  const float mean = w.mean, r = opf_gpu::rsqrt(w.m2 / (float)cols + eps);

  auto normalize = [&](float xv, float g, float b) { return (xv - mean) * r * g + b; };
  if (packed) {
    for (int k = threadIdx.x * V; k < cols; k += OPF_TUNE_BLOCK * V) {
      const Pack<T> px = load_pack(x, k), pg = load_pack(gamma, k), pb = load_pack(beta, k);
      Pack<T> py;
      for (int e = 0; e < V; ++e)
        from_float(py.v[e], normalize(to_float(px.v[e]), to_float(pg.v[e]), to_float(pb.v[e])));
      store_pack(y, k, py);
    }
  } else {
    for (int j = threadIdx.x; j < cols; j += OPF_TUNE_BLOCK)
      store(y, j, normalize(load(x, j), load(gamma, j), load(beta, j)));
  }
  if (threadIdx.x == 0) {
    static_cast<float*>(a.ptr[4])[row] = mean;
    static_cast<float*>(a.ptr[5])[row] = r;
  }
}

template <class T>
__device__ void backward_dx(const opf_gpu_args& a) {
  constexpr int V = Pack<T>::n;
  const long long row = blockIdx.x;
  const int cols = (int)a.cols;
  const T* dy = static_cast<const T*>(a.ptr[0]) + row * cols;
  const T* x = static_cast<const T*>(a.ptr[1]) + row * cols;
  const float mean = static_cast<const float*>(a.ptr[2])[row];
  const float r = static_cast<const float*>(a.ptr[3])[row];
  const T* gamma = static_cast<const T*>(a.ptr[4]);
  T* dx = static_cast<T*>(a.ptr[5]) + row * cols;
  const bool packed =
      cols % V == 0 && aligned16(a.ptr[0]) && aligned16(a.ptr[1]) && aligned16(gamma) && aligned16(a.ptr[5]);

  float sum_g = 0.0f, sum_gx = 0.0f;
  auto accumulate = [&](float dyv, float xv, float gv) {
    const float g = gv * dyv;
    sum_g += g;
    sum_gx += g * ((xv - mean) * r);
  };
  if (packed) {
    for (int k = threadIdx.x * V; k < cols; k += OPF_TUNE_BLOCK * V) {
      const Pack<T> pdy = load_pack(dy, k), px = load_pack(x, k), pg = load_pack(gamma, k);
      for (int e = 0; e < V; ++e) accumulate(to_float(pdy.v[e]), to_float(px.v[e]), to_float(pg.v[e]));
    }
  } else {
    for (int j = threadIdx.x; j < cols; j += OPF_TUNE_BLOCK) accumulate(load(dy, j), load(x, j), load(gamma, j));
  }
  block_sum2<OPF_TUNE_BLOCK>(sum_g, sum_gx);

  const float n = (float)cols, scale = r / n;
  auto grad = [&](float dyv, float xv, float gv) { return scale * (n * gv * dyv - sum_g - (xv - mean) * r * sum_gx); };
  if (packed) {
    for (int k = threadIdx.x * V; k < cols; k += OPF_TUNE_BLOCK * V) {
      const Pack<T> pdy = load_pack(dy, k), px = load_pack(x, k), pg = load_pack(gamma, k);
      Pack<T> pdx;
      for (int e = 0; e < V; ++e) from_float(pdx.v[e], grad(to_float(pdy.v[e]), to_float(px.v[e]), to_float(pg.v[e])));
      store_pack(dx, k, pdx);
    }
  } else {
    for (int j = threadIdx.x; j < cols; j += OPF_TUNE_BLOCK)
      store(dx, j, grad(load(dy, j), load(x, j), load(gamma, j)));
  }
}

// Block = COL_TILE columns x LANES row lanes; blockIdx.y picks a contiguous chunk of rows.
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
  const float* mean = static_cast<const float*>(a.ptr[2]);
  const float* rstd = static_cast<const float*>(a.ptr[3]);

  float dg = 0.0f, db = 0.0f;
  if (col < cols) {
    for (long long i = r0 + ty; i < r1; i += kLanes) {
      const float d = load(dy, i * cols + col);
      dg += d * (load(x, i * cols + col) - mean[i]) * rstd[i];
      db += d;
    }
  }
  __shared__ float sg[kLanes][OPF_TUNE_COL_TILE], sb[kLanes][OPF_TUNE_COL_TILE];
  sg[ty][tx] = dg;
  sb[ty][tx] = db;
  __syncthreads();
  if (ty == 0 && col < cols) {
    for (int k = 1; k < kLanes; ++k) {
      dg += sg[k][tx];
      db += sb[k][tx];
    }
    float* ws = static_cast<float*>(a.workspace);
    ws[blockIdx.y * cols + col] = dg;
    ws[(OPF_TUNE_PARTIALS + blockIdx.y) * cols + col] = db;
  }
}

template <class T>
__device__ void backward_final(const opf_gpu_args& a) {
  const long long cols = a.cols, col = (long long)blockIdx.x * OPF_TUNE_BLOCK + threadIdx.x;
  if (col >= cols) return;
  const float* ws = static_cast<const float*>(a.workspace);
  float dg = 0.0f, db = 0.0f;
  for (int p = 0; p < OPF_TUNE_PARTIALS; ++p) {
    dg += ws[p * cols + col];
    db += ws[(OPF_TUNE_PARTIALS + p) * cols + col];
  }
  store(static_cast<T*>(a.ptr[6]), col, dg);
  store(static_cast<T*>(a.ptr[7]), col, db);
}

}  // namespace

#define OPF_LAYER_NORM_KERNELS(SUFFIX, T)                                                                          \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) layer_norm_forward_##SUFFIX(opf_gpu_args a) { forward<T>(a); } \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) layer_norm_backward_##SUFFIX(opf_gpu_args a) {                 \
    backward_dx<T>(a);                                                                                             \
  }                                                                                                                \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) layer_norm_backward_##SUFFIX##_s1(opf_gpu_args a) {            \
    backward_partials<T>(a);                                                                                       \
  }                                                                                                                \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) layer_norm_backward_##SUFFIX##_s2(opf_gpu_args a) {            \
    backward_final<T>(a);                                                                                          \
  }

OPF_LAYER_NORM_KERNELS(f32, float)
OPF_LAYER_NORM_KERNELS(f16, opf_gpu::f16)
OPF_LAYER_NORM_KERNELS(bf16, opf_gpu::bf16)
