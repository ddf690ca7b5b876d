// causal_softmax — GPU kernels, one text for CUDA and HIP (see gpu/gpu_compat.cuh), launched
// through the plans below by the generic host launcher (gpu/launch_abi.h).
//
// Contract: ref.cpp. forward (x [attn_batches, sq, sk], sq == sk) -> y; backward (dy inout, y) ->
// dy overwritten with dx. Storage T = f32 | f16 | bf16, accumulation f32. Row r is query position
// i = r % sq and keeps the keep = i + 1 columns j <= i; the rest of its output is written as exact
// zeros, and x (forward), dy and y (backward) are never used there: a pack that straddles the
// diagonal is loaded whole (it lies inside the row), its masked lanes are discarded.
//
// Work split (one stage, no workspace): a block of BLOCK threads owns ROWS_PER_BLOCK consecutive
// rows (grid = ceil(rows / ROWS_PER_BLOCK)). How it works on them depends on sk alone, so every
// thread of a block takes the same path (the same barriers and shuffles):
//   sk <= GROUP * CACHE_ITEMS   group mode: GROUP = BLOCK / ROWS_PER_BLOCK lanes (<= 32, inside one
//                               warp on every warp size) per row, the kept part held in registers
//                               (at most CACHE_ITEMS values per lane), reductions by lane shuffles;
//                               the kept part read once, the whole row written once.
//   sk <= BLOCK * CACHE_ITEMS   block mode: the whole block on each of its rows in turn, in
//                               registers, reductions through shared memory; one read, one write.
//   longer rows                 block mode, streamed: the kept part is read again for each pass
//                               (max, sum of exponentials, output), from L2 on a real device.
// Rows whose length is a multiple of the 16-byte pack (4 f32 / 8 f16 or bf16), with 16-byte
// aligned tensors, move in packs; others element by element. Every reduction combines lanes in a
// fixed order and no atomics are used: results are bitwise reproducible run to run.
//
// forward: z = scale * x over the kept part; a NaN there or a kept maximum of +-inf makes the kept
//   part NaN (the maximum propagates NaN), the masked part stays 0; else y = exp(z - max) / sum.
// backward: dx = scale * y * (dy - sum_{k<=i} dy_k y_k) over the kept part, 0 beyond, in place over
//   dy (each lane reads its elements before it overwrites them; only its own).
#include "gpu/gpu_compat.cuh"

// Tuning (docs/design.md, principle 6): the manifest's `tune` table arrives as -DOPF_TUNE_<NAME>; the
// JIT may override these. Defaults match kernels/manifest.toml.
#ifndef OPF_TUNE_BLOCK
#define OPF_TUNE_BLOCK 256
#endif
#ifndef OPF_TUNE_ROWS_PER_BLOCK  // rows per block: BLOCK / ROWS_PER_BLOCK lanes per row in group mode
#define OPF_TUNE_ROWS_PER_BLOCK 8
#endif
#ifndef OPF_TUNE_CACHE_ITEMS  // values per lane (and per tensor) held in registers: a power of two
#define OPF_TUNE_CACHE_ITEMS 16
#endif

#if OPF_TUNE_BLOCK % 64 != 0 || OPF_TUNE_BLOCK > 1024
#error "OPF_TUNE_BLOCK must be a multiple of 64 (whole warps on every warp size), at most 1024"
#endif
#if OPF_TUNE_BLOCK % OPF_TUNE_ROWS_PER_BLOCK != 0 || OPF_TUNE_BLOCK / OPF_TUNE_ROWS_PER_BLOCK > 32 || \
    (OPF_TUNE_BLOCK / OPF_TUNE_ROWS_PER_BLOCK & (OPF_TUNE_BLOCK / OPF_TUNE_ROWS_PER_BLOCK - 1)) != 0
#error "OPF_TUNE_BLOCK / OPF_TUNE_ROWS_PER_BLOCK (lanes per row) must be a power of two, at most 32"
#endif
#if OPF_TUNE_CACHE_ITEMS < 1 || OPF_TUNE_CACHE_ITEMS > 128 || (OPF_TUNE_CACHE_ITEMS & (OPF_TUNE_CACHE_ITEMS - 1)) != 0
#error "OPF_TUNE_CACHE_ITEMS must be a power of two in [1, 128]"
#endif

extern "C" {
__constant__ opf_gpu_plan causal_softmax_forward_plan = {
    1, OPF_EXTENT_ONE, 0, {{OPF_EXTENT_ROWS, OPF_TUNE_ROWS_PER_BLOCK, 1, OPF_TUNE_BLOCK, 0}}};
__constant__ opf_gpu_plan causal_softmax_backward_plan = {
    1, OPF_EXTENT_ONE, 0, {{OPF_EXTENT_ROWS, OPF_TUNE_ROWS_PER_BLOCK, 1, OPF_TUNE_BLOCK, 0}}};
}

// Full unrolling of the register-cache loops (their trip counts are template constants), so that
// the cache stays in registers. The host emulation's compiler does not know the pragma.
#if defined(__CUDACC__) || defined(__HIP__) || defined(__HIPCC_RTC__)
#define OPF_CSM_UNROLL _Pragma("unroll")
#else
#define OPF_CSM_UNROLL
#endif

namespace {

using namespace opf_gpu;

constexpr int kBlock = OPF_TUNE_BLOCK;
constexpr int kRowsPerBlock = OPF_TUNE_ROWS_PER_BLOCK;
constexpr int kGroup = kBlock / kRowsPerBlock;
constexpr int kCache = OPF_TUNE_CACHE_ITEMS;

// +inf and NaN without host headers (IEEE arithmetic, folded by every compiler).
OPF_DEVICE float pos_inf() {
  const float big = 1.0e30f;
  return big * big;
}
OPF_DEVICE float quiet_nan() { return pos_inf() - pos_inf(); }
OPF_DEVICE bool is_finite(float v) { return fabsf(v) <= 3.40282347e38f; }  // false for +-inf and NaN
// max that propagates NaN (fmaxf would drop it): a NaN score must reach every lane.
OPF_DEVICE float nan_max(float a, float b) { return (a > b || a != a) ? a : b; }

// The lanes that share one row. Both kinds give every lane the same result: a butterfly of
// commutative steps inside a warp, then (block) every thread combines the warps' partials in the
// same fixed order.
struct GroupTeam {  // kGroup lanes of one warp (wavefront): shuffles only
  static constexpr int kSize = kGroup;
  int lane;
  OPF_DEVICE float sum(float v) const {
    for (int m = kGroup / 2; m > 0; m /= 2) v += shfl_xor(v, m);
    return v;
  }
  OPF_DEVICE float max(float v) const {
    for (int m = kGroup / 2; m > 0; m /= 2) v = nan_max(v, shfl_xor(v, m));
    return v;
  }
};

struct BlockTeam {  // the whole block: shuffles inside each warp, then the warps' partials
  static constexpr int kSize = kBlock;
  int lane;
  template <bool kMax>
  OPF_DEVICE static float reduce(float v) {
    constexpr int kWarps = kBlock / OPF_WARP_SIZE;
    __shared__ float partial[kBlock / 32];  // room for the smallest warp size
    for (int m = OPF_WARP_SIZE / 2; m > 0; m /= 2) {
      const float o = shfl_xor(v, m);
      v = kMax ? nan_max(v, o) : v + o;
    }
    if (threadIdx.x % OPF_WARP_SIZE == 0) partial[threadIdx.x / OPF_WARP_SIZE] = v;
    __syncthreads();
    float t = partial[0];
    for (int i = 1; i < kWarps; ++i) t = kMax ? nan_max(t, partial[i]) : t + partial[i];
    __syncthreads();  // the partials may be rewritten by the next reduction
    return t;
  }
  OPF_DEVICE float sum(float v) const { return reduce<false>(v); }
  OPF_DEVICE float max(float v) const { return reduce<true>(v); }
};

// Register-cache layout: slot i of lane `lane` of a kSize-lane team holds row element
//   packed: ((i / V) * kSize + lane) * V + i % V   (slot group i / V is one 16-byte pack)
//   else:   i * kSize + lane
// so that each load instruction of a team covers consecutive memory.
template <int V, int kSize>
OPF_DEVICE int slot_index(int i, int lane, bool packed) {
  return packed ? ((i / V) * kSize + lane) * V + i % V : i * kSize + lane;
}

// Register slots per lane for an n-element row on a `size`-lane team; a packed row needs whole
// packs (packed is cleared when a pack does not fit the cache).
template <class T>
OPF_DEVICE int items_for(long long n, int size, bool& packed) {
  constexpr int V = Pack<T>::n;
  int items = 1;
  while ((long long)items * size < n) items *= 2;
  if (packed && items < V) {
    if (V <= kCache) items = V;
    else packed = false;
  }
  return items;
}

// ------------------------------------------------------------------ forward
struct Forward {
  const void* x;
  void* y;
  long long sq;  // row r keeps (r % sq) + 1 columns
  float scale;
};

template <class T, int I, class Team>
OPF_DEVICE void forward_cached(const Team& team, const Forward& f, long long row, bool active, int n, bool packed) {
  constexpr int V = Pack<T>::n, S = Team::kSize;
  const int lane = team.lane, keep = (int)(row % f.sq) + 1;
  const T* x = static_cast<const T*>(f.x) + row * n;
  T* y = static_cast<T*>(f.y) + row * n;
  float z[I];
  OPF_CSM_UNROLL
  for (int i = 0; i < I; ++i) z[i] = 0.0f;
  float mx = -pos_inf();
  if (active) {
    if (packed) {
      if constexpr (I % V == 0) {
        OPF_CSM_UNROLL
        for (int p = 0; p < I / V; ++p) {
          const int j = (p * S + lane) * V;
          if (j < keep) {
            const Pack<T> px = load_pack(x, j);
            OPF_CSM_UNROLL
            for (int e = 0; e < V; ++e) {
              if (j + e < keep) {
                z[p * V + e] = f.scale * to_float(px.v[e]);
                mx = nan_max(mx, z[p * V + e]);
              }
            }
          }
        }
      }
    } else {
      OPF_CSM_UNROLL
      for (int i = 0; i < I; ++i) {
        const int j = i * S + lane;
        if (j < keep) {
          z[i] = f.scale * load(x, j);
          mx = nan_max(mx, z[i]);
        }
      }
    }
  }
  mx = team.max(mx);
  const bool ok = is_finite(mx);  // the same on every lane of the team

  float sum = 0.0f;
  OPF_CSM_UNROLL
  for (int i = 0; i < I; ++i) {
    if (active && ok && slot_index<V, S>(i, lane, packed) < keep) {
      z[i] = expf(z[i] - mx);
      sum += z[i];
    }
  }
  sum = team.sum(sum);
  const float inv = 1.0f / sum, nan = quiet_nan();
  if (!active) return;
  if (packed) {
    if constexpr (I % V == 0) {
      OPF_CSM_UNROLL
      for (int p = 0; p < I / V; ++p) {
        const int j = (p * S + lane) * V;
        if (j < n) {
          Pack<T> py;
          OPF_CSM_UNROLL
          for (int e = 0; e < V; ++e) from_float(py.v[e], j + e < keep ? (ok ? z[p * V + e] * inv : nan) : 0.0f);
          store_pack(y, j, py);
        }
      }
    }
  } else {
    OPF_CSM_UNROLL
    for (int i = 0; i < I; ++i) {
      const int j = i * S + lane;
      if (j < n) store(y, j, j < keep ? (ok ? z[i] * inv : nan) : 0.0f);
    }
  }
}

// Rows too long for the register cache: three passes over the kept part of x, one block per row.
template <class T>
OPF_DEVICE void forward_streamed(const BlockTeam& team, const Forward& f, long long row, long long n, bool packed) {
  constexpr int V = Pack<T>::n, S = BlockTeam::kSize;
  const long long keep = row % f.sq + 1;
  const T* x = static_cast<const T*>(f.x) + row * n;
  T* y = static_cast<T*>(f.y) + row * n;
  const float scale = f.scale;

  float mx = -pos_inf();
  if (packed) {
    for (long long k = (long long)team.lane * V; k < keep; k += (long long)S * V) {
      const Pack<T> px = load_pack(x, k);
      for (int e = 0; e < V; ++e)
        if (k + e < keep) mx = nan_max(mx, scale * to_float(px.v[e]));
    }
  } else {
    for (long long j = team.lane; j < keep; j += S) mx = nan_max(mx, scale * load(x, j));
  }
  mx = team.max(mx);
  const bool ok = is_finite(mx);

  float sum = 0.0f;
  if (ok) {
    if (packed) {
      for (long long k = (long long)team.lane * V; k < keep; k += (long long)S * V) {
        const Pack<T> px = load_pack(x, k);
        for (int e = 0; e < V; ++e)
          if (k + e < keep) sum += expf(scale * to_float(px.v[e]) - mx);
      }
    } else {
      for (long long j = team.lane; j < keep; j += S) sum += expf(scale * load(x, j) - mx);
    }
  }
  sum = team.sum(sum);
  const float inv = 1.0f / sum, nan = quiet_nan();
  if (packed) {
    for (long long k = (long long)team.lane * V; k < n; k += (long long)S * V) {
      Pack<T> py;
      if (k < keep) {
        const Pack<T> px = load_pack(x, k);
        for (int e = 0; e < V; ++e)
          from_float(py.v[e], k + e < keep ? (ok ? expf(scale * to_float(px.v[e]) - mx) * inv : nan) : 0.0f);
      } else {
        for (int e = 0; e < V; ++e) from_float(py.v[e], 0.0f);
      }
      store_pack(y, k, py);
    }
  } else {
    for (long long j = team.lane; j < n; j += S)
      store(y, j, j < keep ? (ok ? expf(scale * load(x, j) - mx) * inv : nan) : 0.0f);
  }
}

// forward_cached<T, I> for the smallest power of two I >= items (I <= kCache). (No generic lambda:
// NVRTC takes an unannotated lambda's call operator for a host function.)
template <class T, class Team, int I = 1>
OPF_DEVICE void forward_items(int items, const Team& team, const Forward& f, long long row, bool active, int n,
                              bool packed) {
  if constexpr (I < kCache) {
    if (items > I) {
      forward_items<T, Team, I * 2>(items, team, f, row, active, n, packed);
      return;
    }
  }
  forward_cached<T, I>(team, f, row, active, n, packed);
}

template <class T>
__device__ void forward(const opf_gpu_args& a) {
  constexpr int V = Pack<T>::n;
  const long long rows = a.rows, n = a.cols;
  const Forward f{a.ptr[0], a.ptr[1], a.shape[1], (float)a.param[0]};
  bool packed = n % V == 0 && aligned16(f.x) && aligned16(f.y);
  const long long first = (long long)blockIdx.x * kRowsPerBlock;
  if (n <= (long long)kGroup * kCache) {
    const GroupTeam team{(int)(threadIdx.x % kGroup)};
    const long long row = first + threadIdx.x / kGroup;
    const int items = items_for<T>(n, kGroup, packed);
    forward_items<T>(items, team, f, row, row < rows, (int)n, packed);
    return;
  }
  const BlockTeam team{(int)threadIdx.x};
  const bool cached = n <= (long long)kBlock * kCache;
  const int items = cached ? items_for<T>(n, kBlock, packed) : 0;
  for (int k = 0; k < kRowsPerBlock && first + k < rows; ++k) {  // the same rows for every thread
    if (cached) forward_items<T>(items, team, f, first + k, true, (int)n, packed);
    else forward_streamed<T>(team, f, first + k, n, packed);
  }
}

// ------------------------------------------------------------------ backward
struct Backward {
  void* dy;  // in: dy, out: dx
  const void* y;
  long long sq;
  float scale;
};

template <class T, int I, class Team>
OPF_DEVICE void backward_cached(const Team& team, const Backward& b, long long row, bool active, int n, bool packed) {
  constexpr int V = Pack<T>::n, S = Team::kSize;
  const int lane = team.lane, keep = (int)(row % b.sq) + 1;
  T* dy = static_cast<T*>(b.dy) + row * n;
  const T* y = static_cast<const T*>(b.y) + row * n;
  float g[I], yv[I];
  OPF_CSM_UNROLL
  for (int i = 0; i < I; ++i) g[i] = yv[i] = 0.0f;
  float dot = 0.0f;
  if (active) {
    if (packed) {
      if constexpr (I % V == 0) {
        OPF_CSM_UNROLL
        for (int p = 0; p < I / V; ++p) {
          const int j = (p * S + lane) * V;
          if (j < keep) {
            const Pack<T> pg = load_pack(static_cast<const T*>(dy), j), py = load_pack(y, j);
            OPF_CSM_UNROLL
            for (int e = 0; e < V; ++e) {
              if (j + e < keep) {
                g[p * V + e] = to_float(pg.v[e]);
                yv[p * V + e] = to_float(py.v[e]);
                dot += g[p * V + e] * yv[p * V + e];
              }
            }
          }
        }
      }
    } else {
      OPF_CSM_UNROLL
      for (int i = 0; i < I; ++i) {
        const int j = i * S + lane;
        if (j < keep) {
          g[i] = load(static_cast<const T*>(dy), j);
          yv[i] = load(y, j);
          dot += g[i] * yv[i];
        }
      }
    }
  }
  dot = team.sum(dot);
  if (!active) return;
  const float scale = b.scale;
  if (packed) {
    if constexpr (I % V == 0) {
      OPF_CSM_UNROLL
      for (int p = 0; p < I / V; ++p) {
        const int j = (p * S + lane) * V;
        if (j < n) {
          Pack<T> pd;
          OPF_CSM_UNROLL
          for (int e = 0; e < V; ++e)
            from_float(pd.v[e], j + e < keep ? scale * yv[p * V + e] * (g[p * V + e] - dot) : 0.0f);
          store_pack(dy, j, pd);
        }
      }
    }
  } else {
    OPF_CSM_UNROLL
    for (int i = 0; i < I; ++i) {
      const int j = i * S + lane;
      if (j < n) store(dy, j, j < keep ? scale * yv[i] * (g[i] - dot) : 0.0f);
    }
  }
}

// Rows too long for the register cache: the kept parts of dy and y are read twice (the dot, then dx).
template <class T>
OPF_DEVICE void backward_streamed(const BlockTeam& team, const Backward& b, long long row, long long n, bool packed) {
  constexpr int V = Pack<T>::n, S = BlockTeam::kSize;
  const long long keep = row % b.sq + 1;
  T* dy = static_cast<T*>(b.dy) + row * n;
  const T* y = static_cast<const T*>(b.y) + row * n;
  float dot = 0.0f;
  if (packed) {
    for (long long k = (long long)team.lane * V; k < keep; k += (long long)S * V) {
      const Pack<T> pg = load_pack(static_cast<const T*>(dy), k), py = load_pack(y, k);
      for (int e = 0; e < V; ++e)
        if (k + e < keep) dot += to_float(pg.v[e]) * to_float(py.v[e]);
    }
  } else {
    for (long long j = team.lane; j < keep; j += S) dot += load(static_cast<const T*>(dy), j) * load(y, j);
  }
  dot = team.sum(dot);
  const float scale = b.scale;
  if (packed) {
    for (long long k = (long long)team.lane * V; k < n; k += (long long)S * V) {
      Pack<T> pd;
      if (k < keep) {
        const Pack<T> pg = load_pack(static_cast<const T*>(dy), k), py = load_pack(y, k);
        for (int e = 0; e < V; ++e)
          from_float(pd.v[e], k + e < keep ? scale * to_float(py.v[e]) * (to_float(pg.v[e]) - dot) : 0.0f);
      } else {
        for (int e = 0; e < V; ++e) from_float(pd.v[e], 0.0f);
      }
      store_pack(dy, k, pd);
    }
  } else {
    for (long long j = team.lane; j < n; j += S)
      store(dy, j, j < keep ? scale * load(y, j) * (load(static_cast<const T*>(dy), j) - dot) : 0.0f);
  }
}

// backward_cached<T, I> for the smallest power of two I >= items (I <= kCache). (No generic lambda:
// NVRTC takes an unannotated lambda's call operator for a host function.)
template <class T, class Team, int I = 1>
OPF_DEVICE void backward_items(int items, const Team& team, const Backward& b, long long row, bool active, int n,
                               bool packed) {
  if constexpr (I < kCache) {
    if (items > I) {
      backward_items<T, Team, I * 2>(items, team, b, row, active, n, packed);
      return;
    }
  }
  backward_cached<T, I>(team, b, row, active, n, packed);
}

template <class T>
__device__ void backward(const opf_gpu_args& a) {
  constexpr int V = Pack<T>::n;
  const long long rows = a.rows, n = a.cols;
  const Backward b{a.ptr[0], a.ptr[1], a.shape[1], (float)a.param[0]};
  bool packed = n % V == 0 && aligned16(b.dy) && aligned16(b.y);
  const long long first = (long long)blockIdx.x * kRowsPerBlock;
  if (n <= (long long)kGroup * kCache) {
    const GroupTeam team{(int)(threadIdx.x % kGroup)};
    const long long row = first + threadIdx.x / kGroup;
    const int items = items_for<T>(n, kGroup, packed);
    backward_items<T>(items, team, b, row, row < rows, (int)n, packed);
    return;
  }
  const BlockTeam team{(int)threadIdx.x};
  const bool cached = n <= (long long)kBlock * kCache;
  const int items = cached ? items_for<T>(n, kBlock, packed) : 0;
  for (int k = 0; k < kRowsPerBlock && first + k < rows; ++k) {
    if (cached) backward_items<T>(items, team, b, first + k, true, (int)n, packed);
    else backward_streamed<T>(team, b, first + k, n, packed);
  }
}

}  // namespace

#define OPF_CAUSAL_SOFTMAX_KERNELS(SUFFIX, T)                                                                          \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) causal_softmax_forward_##SUFFIX(opf_gpu_args a) { forward<T>(a); } \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) causal_softmax_backward_##SUFFIX(opf_gpu_args a) { backward<T>(a); }

OPF_CAUSAL_SOFTMAX_KERNELS(f32, float)
OPF_CAUSAL_SOFTMAX_KERNELS(f16, opf_gpu::f16)
OPF_CAUSAL_SOFTMAX_KERNELS(bf16, opf_gpu::bf16)
