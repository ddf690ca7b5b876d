// syncbn — GPU kernels, one text for CUDA and HIP (see gpu/gpu_compat.cuh), launched through the
// plans below by the generic host launcher (gpu/launch_abi.h).
//
// Contract: ref.cpp. x is [N, C, HW] (NCHW entries: rows = N*C, cols = HW) or [M, C] (the _c_last
// entries: rows = M, cols = C). Storage T = f32 | f16 | bf16; statistics, weight/bias and every
// accumulation f32.
//   welford (NCHW)       s0: one block per (n, c) row: Welford per thread, Chan merge over the block,
//                        (count, mean, M2) of the row into the workspace. s1: MERGE_GRID blocks,
//                        one thread per channel (grid-stride) Chan-merges its N rows in order n = 0..
//   welford_c_last       s0: block (COL_TILE channels x BLOCK/COL_TILE row lanes), blockIdx.y = one of
//                        PARTIALS row chunks: Welford per thread, lanes merged in order, one partial
//                        per (chunk, channel). s1: one thread per channel merges the PARTIALS in order.
//   backward_reduce[_c_last]  the same two-stage shapes with the sums dy and dy (x - mean).
//   welford_parallel     one thread per channel: Chan's merge of the K shards (two-pass, as ref.cpp),
//                        invstd, running-stat update.
//   forward*, relu_backward*, backward_elemt*: elementwise with per-channel constants; a block
//                        covers EW_ROWS rows (a contiguous element range), 16-byte packs when the
//                        row length allows.
// No atomics; every cross-block reduction goes through the workspace and a later stage in a fixed
// order: results are bitwise reproducible run to run.
#include "gpu/gpu_compat.cuh"

// Tuning (docs/design.md, principle 6): the manifest's `tune` table arrives as -DOPF_TUNE_<NAME>; the
// JIT may override these. Defaults match kernels/manifest.toml.
#ifndef OPF_TUNE_BLOCK
#define OPF_TUNE_BLOCK 256
#endif
#ifndef OPF_TUNE_COL_TILE  // channels per block in the channels-last reductions
#define OPF_TUNE_COL_TILE 32
#endif
#ifndef OPF_TUNE_PARTIALS  // row chunks of the channels-last two-stage reductions
#define OPF_TUNE_PARTIALS 64
#endif
#ifndef OPF_TUNE_EW_ROWS  // rows per block of the elementwise entries
#define OPF_TUNE_EW_ROWS 16
#endif
#ifndef OPF_TUNE_MERGE_GRID  // blocks of the NCHW per-channel merge stage
#define OPF_TUNE_MERGE_GRID 16
#endif

#if OPF_TUNE_BLOCK % 64 != 0 || OPF_TUNE_BLOCK > 1024
#error "OPF_TUNE_BLOCK must be a multiple of 64 (whole wavefronts) and at most 1024"
#endif
#if OPF_TUNE_BLOCK % OPF_TUNE_COL_TILE != 0
#error "OPF_TUNE_BLOCK must be a multiple of OPF_TUNE_COL_TILE"
#endif
#if OPF_TUNE_PARTIALS < 1 || OPF_TUNE_EW_ROWS < 1 || OPF_TUNE_MERGE_GRID < 1
#error "OPF_TUNE_PARTIALS, OPF_TUNE_EW_ROWS and OPF_TUNE_MERGE_GRID must be at least 1"
#endif

#define OPF_SYNCBN_EW_PLAN                                        \
  {                                                               \
    1, OPF_EXTENT_ONE, 0, {                                       \
      { OPF_EXTENT_ROWS, OPF_TUNE_EW_ROWS, 1, OPF_TUNE_BLOCK, 0 } \
    }                                                             \
  }

extern "C" {
// NCHW reductions: s0 one block per row, workspace = 3 (welford) / 2 (backward_reduce) floats per row.
__constant__ opf_gpu_plan syncbn_welford_plan = {
    2,
    OPF_EXTENT_ROWS,
    3 * (int)sizeof(float),
    {{OPF_EXTENT_ROWS, 1, 1, OPF_TUNE_BLOCK, 0}, {OPF_EXTENT_ONE, 1, OPF_TUNE_MERGE_GRID, OPF_TUNE_BLOCK, 0}}};
__constant__ opf_gpu_plan syncbn_backward_reduce_plan = {
    2,
    OPF_EXTENT_ROWS,
    2 * (int)sizeof(float),
    {{OPF_EXTENT_ROWS, 1, 1, OPF_TUNE_BLOCK, 0}, {OPF_EXTENT_ONE, 1, OPF_TUNE_MERGE_GRID, OPF_TUNE_BLOCK, 0}}};
// Channels-last reductions: s0 (channel tile, row chunk), workspace = PARTIALS x 3 / 2 floats per channel.
__constant__ opf_gpu_plan syncbn_welford_c_last_plan = {
    2,
    OPF_EXTENT_COLS,
    3 * OPF_TUNE_PARTIALS*(int)sizeof(float),
    {{OPF_EXTENT_COLS, OPF_TUNE_COL_TILE, OPF_TUNE_PARTIALS, OPF_TUNE_BLOCK, 0},
     {OPF_EXTENT_COLS, OPF_TUNE_BLOCK, 1, OPF_TUNE_BLOCK, 0}}};
__constant__ opf_gpu_plan syncbn_backward_reduce_c_last_plan = {
    2,
    OPF_EXTENT_COLS,
    2 * OPF_TUNE_PARTIALS*(int)sizeof(float),
    {{OPF_EXTENT_COLS, OPF_TUNE_COL_TILE, OPF_TUNE_PARTIALS, OPF_TUNE_BLOCK, 0},
     {OPF_EXTENT_COLS, OPF_TUNE_BLOCK, 1, OPF_TUNE_BLOCK, 0}}};
// welford_parallel: tensor 0 is mean_all [K, C]: one thread per channel.
__constant__ opf_gpu_plan syncbn_welford_parallel_plan = {
    1, OPF_EXTENT_ONE, 0, {{OPF_EXTENT_COLS, OPF_TUNE_BLOCK, 1, OPF_TUNE_BLOCK, 0}}};
__constant__ opf_gpu_plan syncbn_forward_plan = OPF_SYNCBN_EW_PLAN;
__constant__ opf_gpu_plan syncbn_forward_c_last_plan = OPF_SYNCBN_EW_PLAN;
__constant__ opf_gpu_plan syncbn_forward_z_c_last_plan = OPF_SYNCBN_EW_PLAN;
__constant__ opf_gpu_plan syncbn_relu_backward_c_last_plan = OPF_SYNCBN_EW_PLAN;
__constant__ opf_gpu_plan syncbn_relu_backward_z_c_last_plan = OPF_SYNCBN_EW_PLAN;
__constant__ opf_gpu_plan syncbn_backward_elemt_plan = OPF_SYNCBN_EW_PLAN;
__constant__ opf_gpu_plan syncbn_backward_elemt_c_last_plan = OPF_SYNCBN_EW_PLAN;
}

namespace {

using namespace opf_gpu;

constexpr int kLanes = OPF_TUNE_BLOCK / OPF_TUNE_COL_TILE;  // row lanes of a channels-last reduction block

// Chan's merge that leaves a side with no elements out entirely (welford_merge would multiply an
// empty side's weight 0 by d^2, which is NaN once d^2 overflows).
OPF_DEVICE Welford merge(Welford a, Welford b) {
  if (b.n == 0.0f) return a;
  if (a.n == 0.0f) return b;
  return welford_merge(a, b);
}

// ---------------------------------------------------------------- NCHW reductions
// s0 of welford: block = row (n, c) of x [N, C, HW]; ws[3 row + {0, 1, 2}] = (count, mean, M2).
template <class T>
__device__ void welford_rows(const opf_gpu_args& a) {
  constexpr int V = Pack<T>::n;
  const long long row = blockIdx.x, hw = a.cols;
  const T* x = static_cast<const T*>(a.ptr[0]) + row * hw;
  Welford w = {0.0f, 0.0f, 0.0f};
  if (hw % V == 0 && aligned16(a.ptr[0])) {
    for (long long k = (long long)threadIdx.x * V; k < hw; k += (long long)OPF_TUNE_BLOCK * V) {
      const Pack<T> p = load_pack(x, k);
      for (int e = 0; e < V; ++e) w = welford_push(w, to_float(p.v[e]));
    }
  } else {
    for (long long j = threadIdx.x; j < hw; j += OPF_TUNE_BLOCK) w = welford_push(w, load(x, j));
  }
  w = block_welford<OPF_TUNE_BLOCK>(w);
  if (threadIdx.x == 0) {
    float* ws = static_cast<float*>(a.workspace) + 3 * row;
    ws[0] = w.n;
    ws[1] = w.mean;
    ws[2] = w.m2;
  }
}

// s1 of welford: one thread per channel merges rows (0, c), (1, c), ... in order.
__device__ void welford_rows_merge(const opf_gpu_args& a) {
  const long long n = a.shape[0], ch = a.shape[1];
  const float* ws = static_cast<const float*>(a.workspace);
  for (long long c = (long long)blockIdx.y * OPF_TUNE_BLOCK + threadIdx.x; c < ch;
       c += (long long)OPF_TUNE_MERGE_GRID * OPF_TUNE_BLOCK) {
    Welford w = {0.0f, 0.0f, 0.0f};
    for (long long i = 0; i < n; ++i) {
      const float* p = ws + 3 * (i * ch + c);
      w = merge(w, Welford{p[0], p[1], p[2]});
    }
    static_cast<float*>(a.ptr[1])[c] = w.mean;
    static_cast<float*>(a.ptr[2])[c] = w.n > 0.0f ? w.m2 / w.n : 0.0f;
  }
}

// s0 of backward_reduce: block = row (n, c); ws[2 row + {0, 1}] = (sum dy, sum dy (x - mean_c)).
template <class T>
__device__ void reduce_rows(const opf_gpu_args& a) {
  constexpr int V = Pack<T>::n;
  const long long row = blockIdx.x, hw = a.cols, ch = a.shape[1];
  const T* dy = static_cast<const T*>(a.ptr[0]) + row * hw;
  const T* x = static_cast<const T*>(a.ptr[1]) + row * hw;
  const float m = static_cast<const float*>(a.ptr[2])[row % ch];
  float s = 0.0f, sx = 0.0f;
  if (hw % V == 0 && aligned16(a.ptr[0]) && aligned16(a.ptr[1])) {
    for (long long k = (long long)threadIdx.x * V; k < hw; k += (long long)OPF_TUNE_BLOCK * V) {
      const Pack<T> pg = load_pack(dy, k), px = load_pack(x, k);
      for (int e = 0; e < V; ++e) {
        const float g = to_float(pg.v[e]);
        s += g;
        sx += g * (to_float(px.v[e]) - m);
      }
    }
  } else {
    for (long long j = threadIdx.x; j < hw; j += OPF_TUNE_BLOCK) {
      const float g = load(dy, j);
      s += g;
      sx += g * (load(x, j) - m);
    }
  }
  block_sum2<OPF_TUNE_BLOCK>(s, sx);
  if (threadIdx.x == 0) {
    float* ws = static_cast<float*>(a.workspace) + 2 * row;
    ws[0] = s;
    ws[1] = sx;
  }
}

// The four outputs of backward_reduce (arguments 4..7) for channel c.
OPF_DEVICE void reduce_outputs(const opf_gpu_args& a, long long c, float s, float sx) {
  const float r = static_cast<const float*>(a.ptr[3])[c];
  static_cast<float*>(a.ptr[4])[c] = s;
  static_cast<float*>(a.ptr[5])[c] = sx;
  static_cast<float*>(a.ptr[6])[c] = sx * r;
  static_cast<float*>(a.ptr[7])[c] = s;
}

// s1 of backward_reduce: one thread per channel sums its N rows in order.
__device__ void reduce_rows_merge(const opf_gpu_args& a) {
  const long long n = a.shape[0], ch = a.shape[1];
  const float* ws = static_cast<const float*>(a.workspace);
  for (long long c = (long long)blockIdx.y * OPF_TUNE_BLOCK + threadIdx.x; c < ch;
       c += (long long)OPF_TUNE_MERGE_GRID * OPF_TUNE_BLOCK) {
    float s = 0.0f, sx = 0.0f;
    for (long long i = 0; i < n; ++i) {
      const float* p = ws + 2 * (i * ch + c);
      s += p[0];
      sx += p[1];
    }
    reduce_outputs(a, c, s, sx);
  }
}

// ---------------------------------------------------------------- channels-last reductions
// Thread (tx, ty) of block (bx, by): channel bx * COL_TILE + tx, rows of chunk by from ty in steps
// of kLanes. Chunk by covers rows [by * chunk, (by + 1) * chunk).
struct ColTask {
  long long col, r0, r1;
  int tx, ty;
};
OPF_DEVICE ColTask col_task(const opf_gpu_args& a) {
  ColTask t;
  t.tx = threadIdx.x % OPF_TUNE_COL_TILE;
  t.ty = threadIdx.x / OPF_TUNE_COL_TILE;
  t.col = (long long)blockIdx.x * OPF_TUNE_COL_TILE + t.tx;
  const long long rows = a.rows, chunk = (rows + OPF_TUNE_PARTIALS - 1) / OPF_TUNE_PARTIALS;
  t.r0 = (long long)blockIdx.y * chunk;
  t.r1 = t.r0 + chunk < rows ? t.r0 + chunk : rows;
  return t;
}

// s0 of welford_c_last: ws planes [3][PARTIALS][C] = (count, mean, M2) of (chunk, channel).
template <class T>
__device__ void welford_cols(const opf_gpu_args& a) {
  const ColTask t = col_task(a);
  const long long ch = a.cols;
  const T* x = static_cast<const T*>(a.ptr[0]);
  Welford w = {0.0f, 0.0f, 0.0f};
  if (t.col < ch)
    for (long long i = t.r0 + t.ty; i < t.r1; i += kLanes) w = welford_push(w, load(x, i * ch + t.col));
  __shared__ float sn[kLanes][OPF_TUNE_COL_TILE], sm[kLanes][OPF_TUNE_COL_TILE], sq[kLanes][OPF_TUNE_COL_TILE];
  sn[t.ty][t.tx] = w.n;
  sm[t.ty][t.tx] = w.mean;
  sq[t.ty][t.tx] = w.m2;
  __syncthreads();
  if (t.ty == 0 && t.col < ch) {
    for (int k = 1; k < kLanes; ++k) w = merge(w, Welford{sn[k][t.tx], sm[k][t.tx], sq[k][t.tx]});
    float* ws = static_cast<float*>(a.workspace);
    ws[(0 * OPF_TUNE_PARTIALS + blockIdx.y) * ch + t.col] = w.n;
    ws[(1 * OPF_TUNE_PARTIALS + blockIdx.y) * ch + t.col] = w.mean;
    ws[(2 * OPF_TUNE_PARTIALS + blockIdx.y) * ch + t.col] = w.m2;
  }
}

// s1 of welford_c_last: one thread per channel merges the PARTIALS chunks in order.
__device__ void welford_cols_merge(const opf_gpu_args& a) {
  const long long ch = a.cols, c = (long long)blockIdx.x * OPF_TUNE_BLOCK + threadIdx.x;
  if (c >= ch) return;
  const float* ws = static_cast<const float*>(a.workspace);
  Welford w = {0.0f, 0.0f, 0.0f};
  for (int p = 0; p < OPF_TUNE_PARTIALS; ++p)
    w = merge(w, Welford{ws[(0 * OPF_TUNE_PARTIALS + p) * ch + c], ws[(1 * OPF_TUNE_PARTIALS + p) * ch + c],
                         ws[(2 * OPF_TUNE_PARTIALS + p) * ch + c]});
  static_cast<float*>(a.ptr[1])[c] = w.mean;
  static_cast<float*>(a.ptr[2])[c] = w.n > 0.0f ? w.m2 / w.n : 0.0f;
}

// s0 of backward_reduce_c_last: ws planes [2][PARTIALS][C] = (sum dy, sum dy (x - mean)).
template <class T>
__device__ void reduce_cols(const opf_gpu_args& a) {
  const ColTask t = col_task(a);
  const long long ch = a.cols;
  const T* dy = static_cast<const T*>(a.ptr[0]);
  const T* x = static_cast<const T*>(a.ptr[1]);
  float s = 0.0f, sx = 0.0f;
  if (t.col < ch) {
    const float m = static_cast<const float*>(a.ptr[2])[t.col];
    for (long long i = t.r0 + t.ty; i < t.r1; i += kLanes) {
      const float g = load(dy, i * ch + t.col);
      s += g;
      sx += g * (load(x, i * ch + t.col) - m);
    }
  }
  __shared__ float ss[kLanes][OPF_TUNE_COL_TILE], ssx[kLanes][OPF_TUNE_COL_TILE];
  ss[t.ty][t.tx] = s;
  ssx[t.ty][t.tx] = sx;
  __syncthreads();
  if (t.ty == 0 && t.col < ch) {
    for (int k = 1; k < kLanes; ++k) {
      s += ss[k][t.tx];
      sx += ssx[k][t.tx];
    }
    float* ws = static_cast<float*>(a.workspace);
    ws[(0 * OPF_TUNE_PARTIALS + blockIdx.y) * ch + t.col] = s;
    ws[(1 * OPF_TUNE_PARTIALS + blockIdx.y) * ch + t.col] = sx;
  }
}

// s1 of backward_reduce_c_last: one thread per channel sums the PARTIALS chunks in order.
__device__ void reduce_cols_merge(const opf_gpu_args& a) {
  const long long ch = a.cols, c = (long long)blockIdx.x * OPF_TUNE_BLOCK + threadIdx.x;
  if (c >= ch) return;
  const float* ws = static_cast<const float*>(a.workspace);
  float s = 0.0f, sx = 0.0f;
  for (int p = 0; p < OPF_TUNE_PARTIALS; ++p) {
    s += ws[(0 * OPF_TUNE_PARTIALS + p) * ch + c];
    sx += ws[(1 * OPF_TUNE_PARTIALS + p) * ch + c];
  }
  reduce_outputs(a, c, s, sx);
}

// ---------------------------------------------------------------- welford_parallel
// (mean_all [K, C], var_all [K, C], count_all [K], running_mean, running_var, mean, invstd)
__device__ void welford_parallel(const opf_gpu_args& a) {
  const long long k = a.rows, ch = a.cols, c = (long long)blockIdx.x * OPF_TUNE_BLOCK + threadIdx.x;
  if (c >= ch) return;
  const float* mean_all = static_cast<const float*>(a.ptr[0]);
  const float* var_all = static_cast<const float*>(a.ptr[1]);
  const float* count = static_cast<const float*>(a.ptr[2]);
  const float eps = (float)a.param[0], mom = (float)a.param[1];
  float n = 0.0f, s = 0.0f;
  for (long long j = 0; j < k; ++j) {
    n += count[j];
    s += count[j] * mean_all[j * ch + c];
  }
  const float mu = s / n;
  float m2 = 0.0f;
  for (long long j = 0; j < k; ++j) {
    const float d = mean_all[j * ch + c] - mu;
    m2 += var_all[j * ch + c] * count[j] + count[j] * d * d;
  }
  static_cast<float*>(a.ptr[5])[c] = mu;
  static_cast<float*>(a.ptr[6])[c] = opf_gpu::rsqrt(m2 / n + eps);
  float* rm = static_cast<float*>(a.ptr[3]);
  float* rv = static_cast<float*>(a.ptr[4]);
  rm[c] = (1.0f - mom) * rm[c] + mom * mu;
  rv[c] = (1.0f - mom) * rv[c] + mom * (m2 / (n - 1.0f));
}

// ---------------------------------------------------------------- elementwise entries
// Element position (column within the row, channel) of a thread's walk through a block's range
// in steps of `step` elements: one division at the start, then additions (no 64-bit division per
// element). NCHW: channel = row % C; channels last: channel = column.
struct Walk {
  long long col, c, cols, ch, dcol, dc;
  bool last;
  OPF_DEVICE void start(long long e, long long step) {
    const long long row = e / cols, q = step / cols;
    col = e - row * cols;
    c = last ? col : row % ch;
    dcol = step - q * cols;
    dc = last ? 0 : q % ch;
  }
  OPF_DEVICE void advance() {
    col += dcol;
    const bool carry = col >= cols;
    if (carry) col -= cols;
    if (last) {
      c = col;
    } else {
      c += dc + (carry ? 1 : 0);  // < 2 C
      if (c >= ch) c -= ch;
    }
  }
};

// Block b covers rows [b EW_ROWS, (b + 1) EW_ROWS) of tensor 0, a contiguous element range; f(v, c)
// maps the values of the storage inputs (arguments 0 .. NIN-1) at one element of channel c to the
// output. Packs when the row length is a multiple of the pack (so a pack never straddles a row:
// NCHW one channel, channels last V consecutive channels).
template <class T, int NIN, class F>
__device__ void elementwise(const opf_gpu_args& a, int out, bool last, F f) {
  constexpr int V = Pack<T>::n;
  const long long rows = a.rows, cols = a.cols;
  const long long r0 = (long long)blockIdx.x * OPF_TUNE_EW_ROWS;
  const long long r1 = r0 + OPF_TUNE_EW_ROWS < rows ? r0 + OPF_TUNE_EW_ROWS : rows;
  const long long e0 = r0 * cols, e1 = r1 * cols;
  if (e1 <= e0) return;  // no elements (cols = 0): no barrier in these kernels
  Walk w;
  w.cols = cols;
  w.ch = last ? cols : a.shape[1];
  w.last = last;
  const T* src[NIN];
  bool packed = cols % V == 0 && aligned16(a.ptr[out]);
  for (int i = 0; i < NIN; ++i) {
    src[i] = static_cast<const T*>(a.ptr[i]);
    packed = packed && aligned16(src[i]);
  }
  T* dst = static_cast<T*>(a.ptr[out]);
  float v[NIN];
  if (packed) {
    constexpr long long kStep = (long long)OPF_TUNE_BLOCK * V;
    w.start(e0 + (long long)threadIdx.x * V, kStep);
    for (long long k = e0 + (long long)threadIdx.x * V; k < e1; k += kStep, w.advance()) {
      Pack<T> p[NIN];
      for (int i = 0; i < NIN; ++i) p[i] = load_pack(src[i], k);
      Pack<T> o;
      for (int e = 0; e < V; ++e) {
        for (int i = 0; i < NIN; ++i) v[i] = to_float(p[i].v[e]);
        from_float(o.v[e], f(v, last ? w.c + e : w.c));
      }
      store_pack(dst, k, o);
    }
  } else {
    w.start(e0 + threadIdx.x, OPF_TUNE_BLOCK);
    for (long long j = e0 + threadIdx.x; j < e1; j += OPF_TUNE_BLOCK, w.advance()) {
      for (int i = 0; i < NIN; ++i) v[i] = load(src[i], j);
      store(dst, j, f(v, w.c));
    }
  }
}

// The forward's value before the ReLU, operand for operand the same in forward and relu_backward
// (so the backward's mask is exactly where the forward wrote 0).
OPF_DEVICE float pre_relu(float x, float m, float r, float w, float b) { return (x - m) * r * w + b; }

// forward[_c_last] (x, mean, invstd, weight, bias, y); forward_z_c_last (x, z, mean, ..., y).
template <class T, bool Z>
__device__ void forward(const opf_gpu_args& a, bool last) {
  constexpr int o = Z ? 1 : 0;
  const float* mean = static_cast<const float*>(a.ptr[1 + o]);
  const float* invstd = static_cast<const float*>(a.ptr[2 + o]);
  const float* weight = static_cast<const float*>(a.ptr[3 + o]);
  const float* bias = static_cast<const float*>(a.ptr[4 + o]);
  const bool relu = last && a.param[2] != 0.0;
  auto f = [&](const float* v, long long c) {
    float t = pre_relu(v[0], mean[c], invstd[c], weight[c], bias[c]);
    if (Z) t = t + v[Z ? 1 : 0];
    return relu && t <= 0.0f ? 0.0f : t;
  };
  elementwise<T, 1 + o>(a, 5 + o, last, f);
}

// relu_backward[_z]_c_last (dy, x, [z,] mean, invstd, weight, bias, dy_masked).
template <class T, bool Z>
__device__ void relu_backward(const opf_gpu_args& a) {
  constexpr int o = Z ? 1 : 0;
  const float* mean = static_cast<const float*>(a.ptr[2 + o]);
  const float* invstd = static_cast<const float*>(a.ptr[3 + o]);
  const float* weight = static_cast<const float*>(a.ptr[4 + o]);
  const float* bias = static_cast<const float*>(a.ptr[5 + o]);
  auto f = [&](const float* v, long long c) {
    float t = pre_relu(v[1], mean[c], invstd[c], weight[c], bias[c]);
    if (Z) t = t + v[Z ? 2 : 0];
    return t <= 0.0f ? 0.0f : v[0];
  };
  elementwise<T, 2 + o>(a, 6 + o, true, f);
}

// backward_elemt[_c_last] (dy, x, mean, invstd, weight, sum_dy, sum_dy_xmu, count_all, dx).
template <class T>
__device__ void backward_elemt(const opf_gpu_args& a, bool last) {
  const float* mean = static_cast<const float*>(a.ptr[2]);
  const float* invstd = static_cast<const float*>(a.ptr[3]);
  const float* weight = static_cast<const float*>(a.ptr[4]);
  const float* sum_dy = static_cast<const float*>(a.ptr[5]);
  const float* sum_dy_xmu = static_cast<const float*>(a.ptr[6]);
  const float* count = static_cast<const float*>(a.ptr[7]);
  float n = 0.0f;
  for (long long j = 0; j < a.arg_shape[7][0]; ++j) n += count[j];
  auto f = [&](const float* v, long long c) {
    const float r = invstd[c];
    const float k1 = sum_dy[c] / n, k2 = r * r * sum_dy_xmu[c] / n;
    return (v[0] - k1 - (v[1] - mean[c]) * k2) * weight[c] * r;
  };
  elementwise<T, 2>(a, 8, last, f);
}

}  // namespace

#define OPF_SYNCBN_K(NAME, SUFFIX) \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) syncbn_##NAME##_##SUFFIX(opf_gpu_args a)

#define OPF_SYNCBN_KERNELS(SUFFIX, T)                                         \
  OPF_SYNCBN_K(welford, SUFFIX) { welford_rows<T>(a); }                       \
  OPF_SYNCBN_K(welford, SUFFIX##_s1) { welford_rows_merge(a); }               \
  OPF_SYNCBN_K(welford_c_last, SUFFIX) { welford_cols<T>(a); }                \
  OPF_SYNCBN_K(welford_c_last, SUFFIX##_s1) { welford_cols_merge(a); }        \
  OPF_SYNCBN_K(welford_parallel, SUFFIX) { welford_parallel(a); }             \
  OPF_SYNCBN_K(forward, SUFFIX) { forward<T, false>(a, false); }              \
  OPF_SYNCBN_K(forward_c_last, SUFFIX) { forward<T, false>(a, true); }        \
  OPF_SYNCBN_K(forward_z_c_last, SUFFIX) { forward<T, true>(a, true); }       \
  OPF_SYNCBN_K(relu_backward_c_last, SUFFIX) { relu_backward<T, false>(a); }  \
  OPF_SYNCBN_K(relu_backward_z_c_last, SUFFIX) { relu_backward<T, true>(a); } \
  OPF_SYNCBN_K(backward_reduce, SUFFIX) { reduce_rows<T>(a); }                \
  OPF_SYNCBN_K(backward_reduce, SUFFIX##_s1) { reduce_rows_merge(a); }        \
  OPF_SYNCBN_K(backward_reduce_c_last, SUFFIX) { reduce_cols<T>(a); }         \
  OPF_SYNCBN_K(backward_reduce_c_last, SUFFIX##_s1) { reduce_cols_merge(a); } \
  OPF_SYNCBN_K(backward_elemt, SUFFIX) { backward_elemt<T>(a, false); }       \
  OPF_SYNCBN_K(backward_elemt_c_last, SUFFIX) { backward_elemt<T>(a, true); }

OPF_SYNCBN_KERNELS(f32, float)
OPF_SYNCBN_KERNELS(f16, opf_gpu::f16)
OPF_SYNCBN_KERNELS(bf16, opf_gpu::bf16)
