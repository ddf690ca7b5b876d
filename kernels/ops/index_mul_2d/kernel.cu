// index_mul_2d — GPU kernels, one text for CUDA and HIP (see gpu/gpu_compat.cuh), launched through
// the plans below by the generic host launcher (gpu/launch_abi.h).
//
// Contract: ref.cpp. Shapes [M, N, F]: in1 [M, F], in2 / out [N, F], idx i64 [N]. Storage T = f32 |
// f16, math in f32, every result rounded once to T. Sizes come from arg_shape (argument 0 is in1
// [M, F] for forward, grad_out [N, F] for backward, grad_grad_in1 [M, F] for double_backward), so
// every grid is fixed: extent ONE x GRID blocks that walk their work grid-stride.
//   forward            s0  out[i,:] = in1[idx[i],:] * in2[i,:]: flat over the N x F elements (16-byte
//                          packs when F and the pointers allow), coalesced in i and c.
//   backward           s0  grad_in2[i,:] = grad_out[i,:] * in1[idx[i],:] (flat, as forward).
//                      s1  grad_in1: the deterministic scatter-add, see below.
//   double_backward    s0  grad_grad_out[i,:] = gg1[idx[i],:] * in2[i,:] + gg2[i,:] * in1[idx[i],:] and
//                          grad_in2[i,:] = gg1[idx[i],:] * grad_out[i,:] (flat, one pass).
//                      s1  grad_in1 = scatter-add of gg2 * grad_out, as backward's s1.
// Scatter-add (grad_in1), no atomics, no workspace: a work item is BUCKET_ROWS target rows
// [m0, m0 + R) x BLOCK columns (one column per thread, coalesced). The block streams idx in tiles of
// BLOCK entries through shared memory in ascending i; every thread walks each tile in order and adds
// a[i,c] * b[i,c] into the f32 sum of row idx[i] when that row is one of its R rows (sums in shared
// memory, one column per thread). So the sum of (m, c) runs over the i with idx[i] = m in ascending
// i, whatever the grid: the bits are the reference's order, reproducible run to run. A row no i
// points to gets 0. Cost: each work item reads all of idx (O(N * M / R) idx reads in total); the
// launch ABI can size no workspace by M in backward (rows = N there) nor by N in double_backward
// (rows = M), which a counting sort would need.
// idx outside [0, M): the contract fails the call, which a kernel cannot do (the generic launcher
// checks shapes, not values). Such a row is never read: its out / grad_in2 / grad_grad_out row is
// written as NaN, and it adds to no grad_in1 row.
#include "gpu/gpu_compat.cuh"

// Tuning (docs/design.md, principle 6): the manifest's `tune` table arrives as -DOPF_TUNE_<NAME>; the
// JIT may override these. Defaults match kernels/manifest.toml.
#ifndef OPF_TUNE_BLOCK  // threads per block, every stage
#define OPF_TUNE_BLOCK 256
#endif
#ifndef OPF_TUNE_GRID  // blocks of every (fixed, grid-stride) grid
#define OPF_TUNE_GRID 512
#endif
#ifndef OPF_TUNE_BUCKET_ROWS  // target rows of grad_in1 per scatter-add work item (f32 sums in shared)
#define OPF_TUNE_BUCKET_ROWS 32
#endif

#if OPF_TUNE_BLOCK % 64 != 0 || OPF_TUNE_BLOCK > 1024
#error "OPF_TUNE_BLOCK must be a multiple of 64 (whole warps of 32 and wavefronts of 64), at most 1024"
#endif
#if OPF_TUNE_BUCKET_ROWS < 1 || OPF_TUNE_BUCKET_ROWS * OPF_TUNE_BLOCK * 4 > 40960
#error "OPF_TUNE_BUCKET_ROWS * OPF_TUNE_BLOCK f32 sums must fit in 40 KiB of static shared memory"
#endif

extern "C" {
__constant__ opf_gpu_plan index_mul_2d_forward_plan = {
    1, OPF_EXTENT_ONE, 0, {{OPF_EXTENT_ONE, 1, OPF_TUNE_GRID, OPF_TUNE_BLOCK, 0}}};
__constant__ opf_gpu_plan index_mul_2d_backward_plan = {
    2,
    OPF_EXTENT_ONE,
    0,
    {{OPF_EXTENT_ONE, 1, OPF_TUNE_GRID, OPF_TUNE_BLOCK, 0}, {OPF_EXTENT_ONE, 1, OPF_TUNE_GRID, OPF_TUNE_BLOCK, 0}}};
__constant__ opf_gpu_plan index_mul_2d_double_backward_plan = {
    2,
    OPF_EXTENT_ONE,
    0,
    {{OPF_EXTENT_ONE, 1, OPF_TUNE_GRID, OPF_TUNE_BLOCK, 0}, {OPF_EXTENT_ONE, 1, OPF_TUNE_GRID, OPF_TUNE_BLOCK, 0}}};
}

namespace {

using namespace opf_gpu;

OPF_DEVICE float quiet_nan() {
  union {
    unsigned u;
    float f;
  } x;
  x.u = 0x7fc00000u;
  return x.f;
}

// Calls op(i, c) for every chunk of V columns [c, c + V) of every row i of an N x F matrix (F a
// multiple of V), flat over the N * F / V chunks so that neighbouring threads take neighbouring
// chunks whatever F is; the grid is fixed (blockIdx.y of GRID), hence the stride.
template <int V, class Op>
OPF_DEVICE void for_each_chunk(long long n, long long f, Op op) {
  const long long fv = f / V, total = n * fv;
  const long long stride = (long long)gridDim.y * OPF_TUNE_BLOCK;
  for (long long e = (long long)blockIdx.y * OPF_TUNE_BLOCK + threadIdx.x; e < total; e += stride) {
    const long long i = e / fv;
    op(i, (e - i * fv) * V);
  }
}

OPF_DEVICE bool row_ok(long long r, long long m) { return r >= 0 && r < m; }

template <class T>
__device__ void forward(const opf_gpu_args& a) {
  constexpr int V = Pack<T>::n;
  const long long m = a.arg_shape[0][0], f = a.arg_shape[0][1], n = a.arg_shape[2][0];
  const T* in1 = static_cast<const T*>(a.ptr[0]);
  const T* in2 = static_cast<const T*>(a.ptr[1]);
  const long long* idx = static_cast<const long long*>(a.ptr[2]);
  T* out = static_cast<T*>(a.ptr[3]);
  if (f % V == 0 && aligned16(in1) && aligned16(in2) && aligned16(out)) {
    for_each_chunk<V>(n, f, [&](long long i, long long c) {
      const long long r = idx[i];
      Pack<T> po;
      if (row_ok(r, m)) {
        const Pack<T> p1 = load_pack(in1, r * f + c), p2 = load_pack(in2, i * f + c);
        for (int e = 0; e < V; ++e) from_float(po.v[e], to_float(p1.v[e]) * to_float(p2.v[e]));
      } else {
        for (int e = 0; e < V; ++e) from_float(po.v[e], quiet_nan());
      }
      store_pack(out, i * f + c, po);
    });
  } else {
    for_each_chunk<1>(n, f, [&](long long i, long long c) {
      const long long r = idx[i];
      store(out, i * f + c, row_ok(r, m) ? load(in1, r * f + c) * load(in2, i * f + c) : quiet_nan());
    });
  }
}

// backward s0: grad_in2 = grad_out * in1[idx]
template <class T>
__device__ void backward_grad_in2(const opf_gpu_args& a) {
  constexpr int V = Pack<T>::n;
  const long long n = a.arg_shape[0][0], f = a.arg_shape[0][1], m = a.arg_shape[1][0];
  const T* g = static_cast<const T*>(a.ptr[0]);
  const T* in1 = static_cast<const T*>(a.ptr[1]);
  const long long* idx = static_cast<const long long*>(a.ptr[3]);
  T* g2 = static_cast<T*>(a.ptr[5]);
  if (f % V == 0 && aligned16(g) && aligned16(in1) && aligned16(g2)) {
    for_each_chunk<V>(n, f, [&](long long i, long long c) {
      const long long r = idx[i];
      Pack<T> po;
      if (row_ok(r, m)) {
        const Pack<T> pg = load_pack(g, i * f + c), p1 = load_pack(in1, r * f + c);
        for (int e = 0; e < V; ++e) from_float(po.v[e], to_float(pg.v[e]) * to_float(p1.v[e]));
      } else {
        for (int e = 0; e < V; ++e) from_float(po.v[e], quiet_nan());
      }
      store_pack(g2, i * f + c, po);
    });
  } else {
    for_each_chunk<1>(n, f, [&](long long i, long long c) {
      const long long r = idx[i];
      store(g2, i * f + c, row_ok(r, m) ? load(g, i * f + c) * load(in1, r * f + c) : quiet_nan());
    });
  }
}

// double_backward s0: grad_grad_out = gg1[idx] * in2 + gg2 * in1[idx], grad_in2 = gg1[idx] * grad_out
template <class T>
__device__ void double_backward_rows(const opf_gpu_args& a) {
  constexpr int V = Pack<T>::n;
  const long long m = a.arg_shape[0][0], f = a.arg_shape[0][1], n = a.arg_shape[1][0];
  const T* gg1 = static_cast<const T*>(a.ptr[0]);
  const T* gg2 = static_cast<const T*>(a.ptr[1]);
  const T* g = static_cast<const T*>(a.ptr[2]);
  const T* in1 = static_cast<const T*>(a.ptr[3]);
  const T* in2 = static_cast<const T*>(a.ptr[4]);
  const long long* idx = static_cast<const long long*>(a.ptr[5]);
  T* ggo = static_cast<T*>(a.ptr[6]);
  T* g2 = static_cast<T*>(a.ptr[8]);
  if (f % V == 0 && aligned16(gg1) && aligned16(gg2) && aligned16(g) && aligned16(in1) && aligned16(in2) &&
      aligned16(ggo) && aligned16(g2)) {
    for_each_chunk<V>(n, f, [&](long long i, long long c) {
      const long long r = idx[i], at = i * f + c;
      Pack<T> po, p2;
      if (row_ok(r, m)) {
        const long long src = r * f + c;
        const Pack<T> pgg1 = load_pack(gg1, src), px1 = load_pack(in1, src);
        const Pack<T> pgg2 = load_pack(gg2, at), pg = load_pack(g, at), px2 = load_pack(in2, at);
        for (int e = 0; e < V; ++e) {
          const float u = to_float(pgg1.v[e]);
          from_float(po.v[e], u * to_float(px2.v[e]) + to_float(pgg2.v[e]) * to_float(px1.v[e]));
          from_float(p2.v[e], u * to_float(pg.v[e]));
        }
      } else {
        for (int e = 0; e < V; ++e) {
          from_float(po.v[e], quiet_nan());
          from_float(p2.v[e], quiet_nan());
        }
      }
      store_pack(ggo, at, po);
      store_pack(g2, at, p2);
    });
  } else {
    for_each_chunk<1>(n, f, [&](long long i, long long c) {
      const long long r = idx[i], at = i * f + c;
      if (row_ok(r, m)) {
        const long long src = r * f + c;
        const float u = load(gg1, src);
        store(ggo, at, u * load(in2, at) + load(gg2, at) * load(in1, src));
        store(g2, at, u * load(g, at));
      } else {
        store(ggo, at, quiet_nan());
        store(g2, at, quiet_nan());
      }
    });
  }
}

// grad_in1[m, c] = sum over i with idx[i] = m, ascending i, of x[i, c] * y[i, c] (x, y [N, F]);
// grad_in1 is [M, F]. See the header for the scheme.
template <class T>
__device__ void scatter_add(const T* x, const T* y, const long long* idx, T* g1, long long m, long long n,
                            long long f) {
  constexpr int R = OPF_TUNE_BUCKET_ROWS;
  __shared__ long long s_idx[OPF_TUNE_BLOCK];
  __shared__ float s_sum[R][OPF_TUNE_BLOCK];
  const int t = threadIdx.x;
  const long long groups = (m + R - 1) / R, tiles = (f + OPF_TUNE_BLOCK - 1) / OPF_TUNE_BLOCK;
  // The work item index is the same for the whole block, so every barrier below is block-uniform.
  for (long long w = blockIdx.y; w < groups * tiles; w += gridDim.y) {
    const long long group = w / tiles, m0 = group * R, c = (w - group * tiles) * OPF_TUNE_BLOCK + t;
    for (int r = 0; r < R; ++r) s_sum[r][t] = 0.0f;
    for (long long base = 0; base < n; base += OPF_TUNE_BLOCK) {
      __syncthreads();  // everyone is done with the previous tile
      if (base + t < n) s_idx[t] = idx[base + t];
      __syncthreads();
      if (c < f) {
        const int count = n - base < OPF_TUNE_BLOCK ? (int)(n - base) : OPF_TUNE_BLOCK;
        for (int j = 0; j < count; ++j) {
          const unsigned long long k = (unsigned long long)(s_idx[j] - m0);  // negative -> huge
          if (k < (unsigned long long)R) {
            const long long at = (base + j) * f + c;
            s_sum[k][t] += load(x, at) * load(y, at);
          }
        }
      }
    }
    if (c < f)
      for (int r = 0; r < R && m0 + r < m; ++r) store(g1, (m0 + r) * f + c, s_sum[r][t]);
  }
}

template <class T>
__device__ void backward_grad_in1(const opf_gpu_args& a) {
  const long long n = a.arg_shape[0][0], f = a.arg_shape[0][1], m = a.arg_shape[1][0];
  scatter_add(static_cast<const T*>(a.ptr[0]), static_cast<const T*>(a.ptr[2]), static_cast<const long long*>(a.ptr[3]),
              static_cast<T*>(a.ptr[4]), m, n, f);
}

template <class T>
__device__ void double_backward_grad_in1(const opf_gpu_args& a) {
  const long long m = a.arg_shape[0][0], f = a.arg_shape[0][1], n = a.arg_shape[1][0];
  scatter_add(static_cast<const T*>(a.ptr[1]), static_cast<const T*>(a.ptr[2]), static_cast<const long long*>(a.ptr[5]),
              static_cast<T*>(a.ptr[7]), m, n, f);
}

}  // namespace

#define OPF_INDEX_MUL_2D_KERNELS(SUFFIX, T)                                                                          \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) index_mul_2d_forward_##SUFFIX(opf_gpu_args a) { forward<T>(a); } \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) index_mul_2d_backward_##SUFFIX(opf_gpu_args a) {                 \
    backward_grad_in2<T>(a);                                                                                         \
  }                                                                                                                  \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) index_mul_2d_backward_##SUFFIX##_s1(opf_gpu_args a) {            \
    backward_grad_in1<T>(a);                                                                                         \
  }                                                                                                                  \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) index_mul_2d_double_backward_##SUFFIX(opf_gpu_args a) {          \
    double_backward_rows<T>(a);                                                                                      \
  }                                                                                                                  \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) index_mul_2d_double_backward_##SUFFIX##_s1(opf_gpu_args a) {     \
    double_backward_grad_in1<T>(a);                                                                                  \
  }

OPF_INDEX_MUL_2D_KERNELS(f32, float)
OPF_INDEX_MUL_2D_KERNELS(f16, opf_gpu::f16)
