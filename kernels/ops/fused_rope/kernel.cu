// fused_rope — GPU kernels, one text for CUDA and HIP (see gpu/gpu_compat.cuh), launched through
// the plans below by the generic host launcher (gpu/launch_abi.h).
//
// Contract: ref.cpp. Rotate-half RoPE on the first d2 columns of each row of d (the rest copied);
// 2-D entries: two rotate-half rows of d / 2 (image row's cos_h/sin_h, column's cos_w/sin_w).
// Storage T = f32 | f16 | bf16, f32 arithmetic, one rounding to T per output. cos/sin: sincosf of
// the f32 freq rounded to T (forward/backward/_thd), T tables as stored (_cached, _2d), f32 tables
// unrounded (_cached_f32, _2d_f32).
//   every entry  one stage; block of BLOCK threads handles ROWS consecutive rows (the row grid of
//                t: [s, b, h] / [total, h] / [b, s, h]); a row is a team of G lanes (G = the power
//                of two >= the row's work items, at most BLOCK), each lane one rotated pair (i,
//                i + half) or one copied column at a time, or one 16-byte pack of each where t/out
//                rows are dense and aligned (4 f32 / 8 f16|bf16 per load). No shared memory, no
//                barriers, no workspace (but thd's flag); every element is one fixed f32 expression: reproducible.
//   thd          stage 0: one block checks cu_seqlens whole into a 4-byte workspace flag; stage 1
//                as above, a row's position its token minus the start of its sequence, found by a
//                binary search of cu_seqlens (once per row).
// Views: t/out are indexed through arg_stride; in place (out == t) is safe: each element is read
// and written by one lane, reads first.
// Not expressible in the generic launcher's checks (it binds shapes only), so not refused here
// as the CPU module refuses them: d2 odd or > d, d % 4 != 0 (2-D), img_h x img_w != s or an image
// larger than its tables, a bad cu_seqlens (not 0 .. total non-decreasing, a sequence longer than
// freqs). Such a call gets NaN in every column of every row instead (no out-of-bounds read).
#include "gpu/gpu_compat.cuh"

// Tuning (docs/design.md, principle 6): the manifest's `tune` table arrives as -DOPF_TUNE_<NAME>; the
// JIT may override these. Defaults match kernels/manifest.toml.
#ifndef OPF_TUNE_BLOCK
#define OPF_TUNE_BLOCK 256
#endif
#ifndef OPF_TUNE_ROWS  // rows of d per block
#define OPF_TUNE_ROWS 32
#endif

#if OPF_TUNE_BLOCK > 1024 || (OPF_TUNE_BLOCK & (OPF_TUNE_BLOCK - 1)) != 0
#error "OPF_TUNE_BLOCK must be a power of two <= 1024"
#endif

// One stage per entry: ceil(rows / ROWS) blocks of BLOCK threads, no workspace.
#define OPF_ROPE_PLAN(ENTRY)                              \
  __constant__ opf_gpu_plan fused_rope_##ENTRY##_plan = { \
      1, OPF_EXTENT_ONE, 0, {{OPF_EXTENT_ROWS, OPF_TUNE_ROWS, 1, OPF_TUNE_BLOCK, 0}}};
extern "C" {
OPF_ROPE_PLAN(forward)
OPF_ROPE_PLAN(backward)
OPF_ROPE_PLAN(forward_cached)
OPF_ROPE_PLAN(backward_cached)
OPF_ROPE_PLAN(forward_cached_f32)
OPF_ROPE_PLAN(backward_cached_f32)
// thd: stage 0 checks cu_seqlens whole (one block) into a 4-byte workspace flag, stage 1 rotates.
#define OPF_ROPE_THD_PLAN(ENTRY)                          \
  __constant__ opf_gpu_plan fused_rope_##ENTRY##_plan = { \
      2,                                                  \
      OPF_EXTENT_ONE,                                     \
      (int)sizeof(int),                                   \
      {{OPF_EXTENT_ONE, 1, 1, OPF_TUNE_BLOCK, 0}, {OPF_EXTENT_ROWS, OPF_TUNE_ROWS, 1, OPF_TUNE_BLOCK, 0}}};
OPF_ROPE_THD_PLAN(forward_thd)
OPF_ROPE_THD_PLAN(backward_thd)
#undef OPF_ROPE_THD_PLAN
OPF_ROPE_PLAN(forward_2d)
OPF_ROPE_PLAN(backward_2d)
OPF_ROPE_PLAN(forward_2d_f32)
OPF_ROPE_PLAN(backward_2d_f32)
}
#undef OPF_ROPE_PLAN

namespace {

using namespace opf_gpu;

// Row layouts of t and where cos/sin come from.
enum Layout { kSbhd = 0, kThd = 1, k2d = 2 };
enum Source { kFreqs = 0, kTable = 1 };

// NaN without host headers (IEEE arithmetic, folded by every compiler).
OPF_DEVICE float quiet_nan() {
  const float big = 1.0e30f;
  return big * big - big * big;
}

// V consecutive values of a dense array p (16-byte aligned at p when V > 1), widened to f32.
template <int V, class S>
OPF_DEVICE void load_vals(const S* p, float* out) {
  constexpr int n = Pack<S>::n;
  if (V >= n) {
    for (int k = 0; k < V / n; ++k) {
      const Pack<S> pk = load_pack(p, (long long)k * n);
      for (int e = 0; e < n; ++e) out[k * n + e] = to_float(pk.v[e]);
    }
  } else {
    for (int e = 0; e < V; ++e) out[e] = to_float(p[e]);
  }
}

// V values of t at element offset off (V > 1: column stride 1 and off aligned).
template <int V, class T>
OPF_DEVICE void load_row(const T* x, long long off, float* out) {
  if (V > 1) load_vals<V>(x + off, out);
  else out[0] = load(x, off);
}
template <int V, class T>
OPF_DEVICE void store_row(T* y, long long off, const float* v) {
  if (V > 1) {
    Pack<T> pk;
    for (int e = 0; e < V; ++e) from_float(pk.v[e], v[e]);
    store_pack(y, off, pk);
  } else {
    store(y, off, v[0]);
  }
}

// cos and sin of V columns: kFreqs: sincosf of the f32 freqs, rounded to T (the contract's cast
// before the multiply); kTable: the tables' values (T or f32) as stored.
template <class T, int Src, int V, class S>
OPF_DEVICE void cos_sin(const S* c, const S* s, float* cv, float* sv) {
  if (Src == kFreqs) {
    float f[V];
    load_vals<V>(c, f);
    for (int e = 0; e < V; ++e) {
      float sn, cs;
      sincosf(f[e], &sn, &cs);
      T tc, ts;
      from_float(tc, cs);
      from_float(ts, sn);
      cv[e] = to_float(tc);
      sv[e] = to_float(ts);
    }
  } else {
    load_vals<V>(c, cv);
    load_vals<V>(s, sv);
  }
}

// One row's placement: t/out element offsets of column 0, column strides, and the cos/sin rows of
// its (one or two) rotated parts.
template <class S>
struct RowAt {
  long long xo, yo;
  const S *c0, *s0, *c1, *s1;
  bool ok;
};

// Rows [blockIdx.x * ROWS, +ROWS) of the row grid. V = 1: element by element through the strides;
// V = Pack<T>::n: 16-byte packs (t/out column stride 1, every offset a multiple of V, aligned).
// Work items per row: standard entries H / V rotated pairs then (d - 2H) / V copied units; 2-D
// entries Q / V pairs of the first part then Q / V of the second (no copied columns).
template <class T, class S, int L, int Src, bool kBwd, int V>
OPF_DEVICE void rope_rows(const opf_gpu_args& a, int in, int out, long long rows, long long d, long long half,
                          long long pairs, long long items, bool valid) {
  const T* x = static_cast<const T*>(a.ptr[in]);
  T* y = static_cast<T*>(a.ptr[out]);
  const int nd = a.arg_ndim[in];
  const long long xs = a.arg_stride[in][nd - 1], ys = a.arg_stride[out][nd - 1];
  int G = 1;
  while (G < items && G < OPF_TUNE_BLOCK) G *= 2;
  const int lane = (int)threadIdx.x % G, team = (int)threadIdx.x / G, teams = OPF_TUNE_BLOCK / G;
  const long long r0 = (long long)blockIdx.x * OPF_TUNE_ROWS;
  for (long long rr = team; rr < OPF_TUNE_ROWS; rr += teams) {
    const long long r = r0 + rr;
    if (r >= rows) break;
    RowAt<S> at;
    at.ok = valid;
    at.c1 = at.s1 = nullptr;
    if (L == kSbhd) {
      // t [s, b, h, d]; freqs or cos/sin [s, 1, 1, d2] dense
      const long long B = a.arg_shape[in][1], H = a.arg_shape[in][2];
      const long long p = r / (B * H), ib = (r / H) % B, ih = r % H;
      at.xo = p * a.arg_stride[in][0] + ib * a.arg_stride[in][1] + ih * a.arg_stride[in][2];
      at.yo = p * a.arg_stride[out][0] + ib * a.arg_stride[out][1] + ih * a.arg_stride[out][2];
      const long long d2 = a.arg_shape[1][3];
      at.c0 = static_cast<const S*>(a.ptr[1]) + p * d2;
      at.s0 = static_cast<const S*>(a.ptr[Src == kFreqs ? 1 : 2]) + p * d2;
    } else if (L == kThd) {
      // t [total, h, d]; cu_seqlens [nseq + 1]; freqs [max_s, 1, 1, d2] dense
      const long long H = a.arg_shape[in][1];
      const long long tok = r / H, ih = r % H;
      at.xo = tok * a.arg_stride[in][0] + ih * a.arg_stride[in][1];
      at.yo = tok * a.arg_stride[out][0] + ih * a.arg_stride[out][1];
      const int* cu = static_cast<const int*>(a.ptr[1]);
      const long long nseq = a.arg_shape[1][0] - 1;  // >= 1 unless !valid
      long long p = 0;
      // cu_seqlens was checked whole by stage 0 (else !at.ok): the search and p stay in range
      if (at.ok) {
        long long lo = 0, hi = nseq;  // the last k with cu[k] <= tok
        while (lo < hi) {
          const long long mid = (lo + hi + 1) / 2;
          if ((long long)cu[mid] <= tok) lo = mid;
          else hi = mid - 1;
        }
        p = tok - (long long)cu[lo];
      }
      at.c0 = at.s0 = static_cast<const S*>(a.ptr[2]) + (at.ok ? p : 0) * a.arg_shape[2][3];
    } else {
      // t [b, s, h, d]; cos_h, sin_h [1, Hr, 1, q], cos_w, sin_w [1, Wr, 1, q] dense
      const long long s = a.arg_shape[in][1], H = a.arg_shape[in][2], q = d / 2;
      const long long ib = r / (s * H), k = (r / H) % s, ih = r % H;
      at.xo = ib * a.arg_stride[in][0] + k * a.arg_stride[in][1] + ih * a.arg_stride[in][2];
      at.yo = ib * a.arg_stride[out][0] + k * a.arg_stride[out][1] + ih * a.arg_stride[out][2];
      const long long Hr = a.arg_shape[1][1], Wr = a.arg_shape[3][1];
      const long long img_h = a.param[0] != 0.0 ? (long long)a.param[0] : Hr;
      const long long img_w = a.param[1] != 0.0 ? (long long)a.param[1] : Wr;
      at.ok = at.ok && img_w > 0 && img_h <= Hr && img_w <= Wr && img_h * img_w == s;
      const long long iy = at.ok ? k / img_w : 0, ix = at.ok ? k % img_w : 0;
      at.c0 = static_cast<const S*>(a.ptr[1]) + iy * q;
      at.s0 = static_cast<const S*>(a.ptr[2]) + iy * q;
      at.c1 = static_cast<const S*>(a.ptr[3]) + ix * q;
      at.s1 = static_cast<const S*>(a.ptr[4]) + ix * q;
    }
    if (!at.ok) {  // a row the kernel cannot place: all NaN, no table read
      for (long long c = lane; c < d; c += G) store(y, at.yo + c * ys, quiet_nan());
      continue;
    }
    for (long long j = lane; j < items; j += G) {
      float lo[V], hi[V];
      if (j < pairs) {
        // the pair (i, i + half) of the part this item is in
        long long i = j * V, cb = 0;
        const S *c = at.c0, *s = at.s0;
        if (L == k2d && i >= half) {
          i -= half;
          cb = 2 * half;
          c = at.c1;
          s = at.s1;
        }
        float clo[V], slo[V], chi[V], shi[V];
        cos_sin<T, Src, V>(c + i, s + i, clo, slo);
        cos_sin<T, Src, V>(c + half + i, s + half + i, chi, shi);
        load_row<V>(x, at.xo + (cb + i) * xs, lo);
        load_row<V>(x, at.xo + (cb + half + i) * xs, hi);
        float ylo[V], yhi[V];
        for (int e = 0; e < V; ++e) {
          if (kBwd) {
            ylo[e] = lo[e] * clo[e] + hi[e] * shi[e];
            yhi[e] = hi[e] * chi[e] - lo[e] * slo[e];
          } else {
            ylo[e] = lo[e] * clo[e] - hi[e] * slo[e];
            yhi[e] = hi[e] * chi[e] + lo[e] * shi[e];
          }
        }
        store_row<V>(y, at.yo + (cb + i) * ys, ylo);
        store_row<V>(y, at.yo + (cb + half + i) * ys, yhi);
      } else {
        const long long col = 2 * half + (j - pairs) * V;  // copied through
        load_row<V>(x, at.xo + col * xs, lo);
        store_row<V>(y, at.yo + col * ys, lo);
      }
    }
  }
}

OPF_DEVICE bool dense_aligned(const opf_gpu_args& a, int i, int V) {
  const int nd = a.arg_ndim[i];
  if (!aligned16(a.ptr[i]) || a.arg_stride[i][nd - 1] != 1) return false;
  for (int k = 0; k + 1 < nd; ++k)
    if (a.arg_stride[i][k] % V != 0) return false;
  return true;
}

template <class T, class S, int L, int Src, bool kBwd>
OPF_DEVICE void rope(const opf_gpu_args& a) {
  constexpr int V = Pack<T>::n;
  const int in = 0, out = L == k2d ? 5 : (L == kSbhd && Src == kFreqs ? 2 : 3);
  const int nd = a.arg_ndim[in];
  const long long d = a.arg_shape[in][nd - 1], rows = a.rows;
  // rotated half width, rotated pairs per row (all parts), first table argument
  const int tab = L == kThd ? 2 : 1;
  long long half, npairs;
  bool valid;  // the shape rules the generic launcher cannot state (the CPU module's errors): else NaN
  if (L == k2d) {
    half = d / 4;
    npairs = 2 * half;
    valid = d % 4 == 0;
  } else {
    const long long d2 = a.arg_shape[tab][3];
    half = (d2 <= d ? d2 : d) / 2;
    npairs = half;
    valid = d2 % 2 == 0 && d2 <= d && (L != kThd || *static_cast<const int*>(a.workspace) == 1);
  }
  bool packed = half % V == 0 && d % V == 0 && dense_aligned(a, in, V) && dense_aligned(a, out, V);
  const int ntab = L == k2d ? 4 : (Src == kFreqs ? 1 : 2);
  for (int k = 0; k < ntab; ++k) packed = packed && aligned16(a.ptr[tab + k]);
  if (L == k2d) packed = packed && (d / 2) % V == 0;
  if (packed) {
    const long long pairs = npairs / V, items = pairs + (L == k2d ? 0 : (d - 2 * half) / V);
    rope_rows<T, S, L, Src, kBwd, V>(a, in, out, rows, d, half, pairs, items, valid);
  } else {
    const long long items = npairs + (L == k2d ? 0 : d - 2 * half);
    rope_rows<T, S, L, Src, kBwd, 1>(a, in, out, rows, d, half, npairs, items, valid);
  }
}

// thd stage 0, one block: cu_seqlens [nseq + 1] is 0 = cu_0 <= cu_1 <= ... <= cu_nseq = total,
// every sequence at most freqs' rows long (the CPU module's errors). Writes 1 (valid) or 0 to the
// workspace; stage 1 then writes NaN everywhere instead of reading t by bad offsets.
OPF_DEVICE void check_cu_seqlens(const opf_gpu_args& a) {
  const int* cu = static_cast<const int*>(a.ptr[1]);
  const long long nseq = a.arg_shape[1][0] - 1, total = a.arg_shape[0][0], max_s = a.arg_shape[2][0];
  float bad = 0.0f;
  if (nseq < 1) {
    bad = 1.0f;
  } else {
    if (threadIdx.x == 0 && (cu[0] != 0 || (long long)cu[nseq] != total)) bad = 1.0f;
    for (long long k = threadIdx.x; k < nseq; k += OPF_TUNE_BLOCK) {
      const long long lo = cu[k], hi = cu[k + 1];
      if (hi < lo || hi > total || hi - lo > max_s) bad += 1.0f;
    }
  }
  bad = block_sum<OPF_TUNE_BLOCK>(bad);
  if (threadIdx.x == 0) *static_cast<int*>(a.workspace) = bad == 0.0f ? 1 : 0;
}

}  // namespace

#define OPF_ROPE_THD_KERNELS(ENTRY, SUFFIX, T, BWD)                                                      \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) fused_rope_##ENTRY##_##SUFFIX(opf_gpu_args a) {      \
    check_cu_seqlens(a);                                                                                 \
  }                                                                                                      \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) fused_rope_##ENTRY##_##SUFFIX##_s1(opf_gpu_args a) { \
    rope<T, float, kThd, kFreqs, BWD>(a);                                                                \
  }
#define OPF_ROPE_KERNEL(ENTRY, SUFFIX, T, S, L, SRC, BWD)                                           \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) fused_rope_##ENTRY##_##SUFFIX(opf_gpu_args a) { \
    rope<T, S, L, SRC, BWD>(a);                                                                     \
  }
#define OPF_ROPE_KERNELS(SUFFIX, T)                                           \
  OPF_ROPE_KERNEL(forward, SUFFIX, T, float, kSbhd, kFreqs, false)            \
  OPF_ROPE_KERNEL(backward, SUFFIX, T, float, kSbhd, kFreqs, true)            \
  OPF_ROPE_KERNEL(forward_cached, SUFFIX, T, T, kSbhd, kTable, false)         \
  OPF_ROPE_KERNEL(backward_cached, SUFFIX, T, T, kSbhd, kTable, true)         \
  OPF_ROPE_KERNEL(forward_cached_f32, SUFFIX, T, float, kSbhd, kTable, false) \
  OPF_ROPE_KERNEL(backward_cached_f32, SUFFIX, T, float, kSbhd, kTable, true) \
  OPF_ROPE_THD_KERNELS(forward_thd, SUFFIX, T, false)                         \
  OPF_ROPE_THD_KERNELS(backward_thd, SUFFIX, T, true)                         \
  OPF_ROPE_KERNEL(forward_2d, SUFFIX, T, T, k2d, kTable, false)               \
  OPF_ROPE_KERNEL(backward_2d, SUFFIX, T, T, k2d, kTable, true)               \
  OPF_ROPE_KERNEL(forward_2d_f32, SUFFIX, T, float, k2d, kTable, false)       \
  OPF_ROPE_KERNEL(backward_2d_f32, SUFFIX, T, float, k2d, kTable, true)

OPF_ROPE_KERNELS(f32, float)
OPF_ROPE_KERNELS(f16, opf_gpu::f16)
OPF_ROPE_KERNELS(bf16, opf_gpu::bf16)
