// bias_swiglu — GPU kernels, one text for CUDA and HIP (see gpu/gpu_compat.cuh), launched through
// the plans below by the generic host launcher (gpu/launch_abi.h).
//
// Contract: ref.cpp. x [N, 2H], bias [2H]; a = x[:, j] + bias[j], c = x[:, H + j] + bias[H + j].
//   forward  (x, bias) -> y [N, H] = silu(a) * c
//   backward (dy, x, bias) -> dx [N, 2H] = [dy s (1 + a (1 - s)) c | dy silu(a)], dbias [2H] = the
//            column sums of the f32 dx (before its rounding to T).
// Storage T = f32 | f16 | bf16, math f32, one rounding to T per output; s(a) and 1 - s(a) from
// exp(-|a|) as the CPU module does (no overflow, no cancellation; exp below -87 taken as 0).
//   forward      one block per OPF_TUNE_ROWS_PER_BLOCK rows; the block's rows are one flat run of
//                element groups (16-byte packs where the rows allow), so short rows fill the block.
//   backward s0  block (column tile, row chunk): dx of COL_TILE columns j (and H + j) over a chunk of
//                rows, and that chunk's f32 column sums of dx, written to the workspace (PARTIALS
//                chunks at most, sized by N alone).
//   backward s1  dbias: each column's chunk sums added in chunk order.
// No atomics: results are bitwise reproducible run to run and the same for warp 32 and 64 (no
// shuffles; the in-block sums go through shared memory in a fixed order).
#include "gpu/gpu_compat.cuh"

// Tuning (docs/design.md, principle 6): the manifest's `tune` table arrives as -DOPF_TUNE_<NAME>; the
// JIT may override these. Defaults match kernels/manifest.toml.
#ifndef OPF_TUNE_BLOCK
#define OPF_TUNE_BLOCK 256
#endif
#ifndef OPF_TUNE_ROWS_PER_BLOCK  // forward: rows of y per block
#define OPF_TUNE_ROWS_PER_BLOCK 2
#endif
#ifndef OPF_TUNE_COL_TILE  // backward: columns j < H per block (each with its column H + j)
#define OPF_TUNE_COL_TILE 128
#endif
#ifndef OPF_TUNE_PARTIALS  // backward: the most row chunks (dbias partial sums) per column
#define OPF_TUNE_PARTIALS 64
#endif

// A backward thread covers 8 columns of a tile (a multiple of every Pack<T>::n: 4 f32, 8 f16/bf16),
// so the tile's thread layout is the same for every dtype (the plan is per entry, not per dtype).
#define OPF_BIAS_SWIGLU_COLS_PER_THREAD 8
#if OPF_TUNE_COL_TILE % OPF_BIAS_SWIGLU_COLS_PER_THREAD != 0
#error "OPF_TUNE_COL_TILE must be a multiple of 8"
#endif
#if OPF_TUNE_BLOCK % (OPF_TUNE_COL_TILE / OPF_BIAS_SWIGLU_COLS_PER_THREAD) != 0
#error "OPF_TUNE_BLOCK must be a multiple of OPF_TUNE_COL_TILE / 8"
#endif
#if OPF_TUNE_BLOCK > 1024 || OPF_TUNE_ROWS_PER_BLOCK < 1 || OPF_TUNE_PARTIALS < 1
#error "bias_swiglu: OPF_TUNE_BLOCK <= 1024, OPF_TUNE_ROWS_PER_BLOCK >= 1, OPF_TUNE_PARTIALS >= 1"
#endif

extern "C" {
__constant__ opf_gpu_plan bias_swiglu_forward_plan = {
    1, OPF_EXTENT_ONE, 0, {{OPF_EXTENT_ROWS, OPF_TUNE_ROWS_PER_BLOCK, 1, OPF_TUNE_BLOCK, 0}}};
// Backward: tensor 0 is dy [N, H], so rows = N and cols = H. Workspace: PARTIALS x 2H f32 sums.
__constant__ opf_gpu_plan bias_swiglu_backward_plan = {
    2,
    OPF_EXTENT_COLS,
    2 * OPF_TUNE_PARTIALS*(int)sizeof(float),
    {{OPF_EXTENT_COLS, OPF_TUNE_COL_TILE, OPF_TUNE_PARTIALS, OPF_TUNE_BLOCK, 0},
     {OPF_EXTENT_COLS, OPF_TUNE_BLOCK, 1, OPF_TUNE_BLOCK, 0}}};
}

namespace {

using namespace opf_gpu;

constexpr int kCpt = OPF_BIAS_SWIGLU_COLS_PER_THREAD;
constexpr int kTx = OPF_TUNE_COL_TILE / kCpt;  // threads across a backward tile's columns
constexpr int kTy = OPF_TUNE_BLOCK / kTx;      // row lanes of a backward block

// n consecutive elements, n = 1 (any row) or a 16-byte pack (rows of a multiple of Pack<T>::n
// with 16-byte aligned tensors), widened to / narrowed from f32.
template <class T, bool kPacked>
struct Io;
template <class T>
struct Io<T, false> {
  static constexpr int n = 1;
  static OPF_DEVICE void load(const T* p, long long i, float* v) { v[0] = to_float(p[i]); }
  static OPF_DEVICE void store(T* p, long long i, const float* v) { from_float(p[i], v[0]); }
};
template <class T>
struct Io<T, true> {
  static constexpr int n = Pack<T>::n;
  static OPF_DEVICE void load(const T* p, long long i, float* v) {
    const Pack<T> k = load_pack(p, i);
    for (int e = 0; e < n; ++e) v[e] = to_float(k.v[e]);
  }
  static OPF_DEVICE void store(T* p, long long i, const float* v) {
    Pack<T> k;
    for (int e = 0; e < n; ++e) from_float(k.v[e], v[e]);
    store_pack(p, i, k);
  }
};

// s(a) = 1 / (1 + exp(-a)) and t = 1 - s(a), from e = exp(-|a|) in (0, 1]: s = 1 / (1 + e) and
// t = e / (1 + e) for a >= 0, swapped for a < 0 (as cpu.cpp's Sigmoid, term for term). exp below
// -87 (under FLT_MIN) is 0, so a saturated side is exactly s = 0 or s = 1. A NaN a gives NaN.
struct Sig {
  float s, t;
};
OPF_DEVICE Sig sigmoid(float a) {
  const float m = -fabsf(a);
  const float e = m < -87.0f ? 0.0f : expf(m);
  const float r = 1.0f / (1.0f + e), er = e * r;
  const bool neg = a < 0.0f;
  Sig g;
  g.s = neg ? er : r;
  g.t = neg ? r : er;
  return g;
}

// ------------------------------------------------------------------ forward
// Rows [r0, r0 + nr): groups of n elements, numbered row by row, dealt to the threads in turn.
template <class T, bool kPacked>
OPF_DEVICE void forward_rows(const T* x, const T* bias, T* y, long long h, long long r0, long long nr) {
  using G = Io<T, kPacked>;
  constexpr int n = G::n;
  const long long groups = h / n;  // per row (h % n == 0 when packed)
  const long long r_end = r0 + nr;
  long long r = r0, g = threadIdx.x;
  while (g >= groups && r < r_end) {  // this thread's first group
    g -= groups;
    ++r;
  }
  while (r < r_end) {
    const long long j = g * n;
    float xa[n], xc[n], ba[n], bc[n], out[n];
    G::load(x, r * 2 * h + j, xa);
    G::load(x, r * 2 * h + h + j, xc);
    G::load(bias, j, ba);
    G::load(bias, h + j, bc);
    for (int e = 0; e < n; ++e) {
      const float a = xa[e] + ba[e], c = xc[e] + bc[e];
      out[e] = a * sigmoid(a).s * c;
    }
    G::store(y, r * h + j, out);
    g += OPF_TUNE_BLOCK;  // the next group of this thread: past the end of a row, into the next
    while (g >= groups && r < r_end) {
      g -= groups;
      ++r;
    }
  }
}

template <class T>
__device__ void forward(const opf_gpu_args& a) {
  constexpr int V = Pack<T>::n;
  const long long rows = a.rows, h = a.cols / 2;
  const long long r0 = (long long)blockIdx.x * OPF_TUNE_ROWS_PER_BLOCK;
  const long long nr = rows - r0 < OPF_TUNE_ROWS_PER_BLOCK ? rows - r0 : OPF_TUNE_ROWS_PER_BLOCK;
  if (h == 0 || nr <= 0) return;
  const T* x = static_cast<const T*>(a.ptr[0]);
  const T* bias = static_cast<const T*>(a.ptr[1]);
  T* y = static_cast<T*>(a.ptr[2]);
  if (h % V == 0 && aligned16(x) && aligned16(bias) && aligned16(y)) forward_rows<T, true>(x, bias, y, h, r0, nr);
  else forward_rows<T, false>(x, bias, y, h, r0, nr);
}

// ------------------------------------------------------------------ backward
// Rows per chunk of the dbias partial sums: N split into at most PARTIALS chunks, each a multiple
// of kTy rows (every row lane of a block has work). A function of N alone: the chunks, and so the
// order of every sum, do not depend on the device or the warp size.
OPF_DEVICE long long chunk_rows(long long rows) {
  const long long c = (rows + OPF_TUNE_PARTIALS - 1) / OPF_TUNE_PARTIALS;
  return (c + kTy - 1) / kTy * kTy;
}
OPF_DEVICE long long used_chunks(long long rows) {
  const long long c = chunk_rows(rows);
  return c == 0 ? 0 : (rows + c - 1) / c;
}

// The tile's kCpt columns of this thread: slot (q, e), q < kCpt / n, e < n, is column
// tile0 + q * kTx * n + tx * n + e (for each q the tile's threads read one contiguous run).
// Rows r0 + ty, r0 + ty + kTy, ... < r1: dx written, f32 dx summed into acc[0] (columns j) and
// acc[1] (columns H + j).
template <class T, bool kPacked>
OPF_DEVICE void backward_rows(const T* dy, const T* x, const T* bias, T* dx, long long h, long long tile0, int tx,
                              int ty, long long r0, long long r1, float (&acc)[2][kCpt]) {
  using G = Io<T, kPacked>;
  constexpr int n = G::n, kQ = kCpt / n;
  float ba[kCpt], bc[kCpt];
  bool in[kQ];  // the whole group lies in the row (h % n == 0 when packed)
  for (int q = 0; q < kQ; ++q) {
    const long long j = tile0 + (long long)q * kTx * n + (long long)tx * n;
    in[q] = j < h;
    if (in[q]) {
      G::load(bias, j, ba + q * n);
      G::load(bias, h + j, bc + q * n);
    }
  }
  for (long long r = r0 + ty; r < r1; r += kTy) {
    const T* xr = x + r * 2 * h;
    const T* dyr = dy + r * h;
    T* dxr = dx + r * 2 * h;
    for (int q = 0; q < kQ; ++q) {
      if (!in[q]) continue;
      const long long j = tile0 + (long long)q * kTx * n + (long long)tx * n;
      float xa[n], xc[n], g[n], da[n], dc[n];
      G::load(xr, j, xa);
      G::load(xr, h + j, xc);
      G::load(dyr, j, g);
      for (int e = 0; e < n; ++e) {
        const float av = xa[e] + ba[q * n + e], cv = xc[e] + bc[q * n + e];
        const Sig s = sigmoid(av);
        const float silu = av * s.s, dsilu = s.s * (1.0f + av * s.t);
        da[e] = g[e] * dsilu * cv;
        dc[e] = g[e] * silu;
        acc[0][q * n + e] += da[e];
        acc[1][q * n + e] += dc[e];
      }
      G::store(dxr, j, da);
      G::store(dxr, h + j, dc);
    }
  }
}

template <class T>
__device__ void backward_dx(const opf_gpu_args& a) {
  constexpr int V = Pack<T>::n;
  const long long rows = a.rows, h = a.cols;
  const long long chunk = chunk_rows(rows), r0 = (long long)blockIdx.y * chunk;
  if (r0 >= rows) return;  // the whole block: a chunk past the rows (stage 1 reads only used ones)
  const long long r1 = r0 + chunk < rows ? r0 + chunk : rows;
  const long long tile0 = (long long)blockIdx.x * OPF_TUNE_COL_TILE;
  const int tx = threadIdx.x % kTx, ty = threadIdx.x / kTx;
  const T* dy = static_cast<const T*>(a.ptr[0]);
  const T* x = static_cast<const T*>(a.ptr[1]);
  const T* bias = static_cast<const T*>(a.ptr[2]);
  T* dx = static_cast<T*>(a.ptr[3]);
  const bool packed = h % V == 0 && aligned16(dy) && aligned16(x) && aligned16(bias) && aligned16(dx);

  float acc[2][kCpt];
  for (int k = 0; k < kCpt; ++k) acc[0][k] = acc[1][k] = 0.0f;
  if (packed) backward_rows<T, true>(dy, x, bias, dx, h, tile0, tx, ty, r0, r1, acc);
  else backward_rows<T, false>(dy, x, bias, dx, h, tile0, tx, ty, r0, r1, acc);

  // The row lanes' sums of each of the tile's 2 x COL_TILE columns, added in lane order.
  __shared__ float lane_sum[kTy][2 * OPF_TUNE_COL_TILE];
  const int n = packed ? V : 1;
  for (int k = 0; k < kCpt; ++k) {
    const int c = (k / n) * kTx * n + tx * n + k % n;  // slot k's column in the tile
    lane_sum[ty][c] = acc[0][k];
    lane_sum[ty][OPF_TUNE_COL_TILE + c] = acc[1][k];
  }
  __syncthreads();
  float* ws = static_cast<float*>(a.workspace) + (long long)blockIdx.y * 2 * h;
  for (int i = threadIdx.x; i < 2 * OPF_TUNE_COL_TILE; i += OPF_TUNE_BLOCK) {
    const int half = i / OPF_TUNE_COL_TILE;
    const long long col = tile0 + i % OPF_TUNE_COL_TILE;
    if (col >= h) continue;
    float s = 0.0f;
    for (int l = 0; l < kTy; ++l) s += lane_sum[l][i];
    ws[half * h + col] = s;
  }
}

// dbias[j], dbias[H + j]: the used chunks' sums in chunk order (N = 0: no chunk, dbias = 0).
template <class T>
__device__ void backward_dbias(const opf_gpu_args& a) {
  const long long rows = a.rows, h = a.cols;
  const long long j = (long long)blockIdx.x * OPF_TUNE_BLOCK + threadIdx.x;
  if (j >= h) return;
  const long long used = used_chunks(rows);
  const float* ws = static_cast<const float*>(a.workspace);
  float sa = 0.0f, sc = 0.0f;
  for (long long p = 0; p < used; ++p) {
    sa += ws[p * 2 * h + j];
    sc += ws[p * 2 * h + h + j];
  }
  T* dbias = static_cast<T*>(a.ptr[4]);
  store(dbias, j, sa);
  store(dbias, h + j, sc);
}

}  // namespace

#define OPF_BIAS_SWIGLU_KERNELS(SUFFIX, T)                                                                          \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) bias_swiglu_forward_##SUFFIX(opf_gpu_args a) { forward<T>(a); } \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) bias_swiglu_backward_##SUFFIX(opf_gpu_args a) {                 \
    backward_dx<T>(a);                                                                                              \
  }                                                                                                                 \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) bias_swiglu_backward_##SUFFIX##_s1(opf_gpu_args a) {            \
    backward_dbias<T>(a);                                                                                           \
  }

OPF_BIAS_SWIGLU_KERNELS(f32, float)
OPF_BIAS_SWIGLU_KERNELS(f16, opf_gpu::f16)
OPF_BIAS_SWIGLU_KERNELS(bf16, opf_gpu::bf16)
