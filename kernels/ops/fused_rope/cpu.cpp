// fused_rope — CPU module (contract: ref.cpp). Highway SIMD: prebuilt modules dispatch on the
// running CPU; the JIT builds only the host target.
// cos and sin per (position, rotary column) in f32, already rounded to T (the contract's cast
// before the multiply): s x d2 sincosf calls shared by the b x h rows of a position, instead of one
// per element. sbhd computes them inside the pass over t, when a task reaches a position (the
// compute overlaps the streaming; a separate table pass, ~5 ms of sincosf at s = 4096, d2 = 128,
// was about a quarter of a 1-thread call); thd builds a table
// first (sequences reuse positions). The pass over t: each row of d is read once
// (dense rows straight from t, rows of a strided view gathered into f32 first), rotated in f32 into
// an L1 scratch row and written once from there (streaming stores for outputs beyond the cache).
// 2-D entries: t [b, s, h, d] as the [b, s, h] row grid; each row is two rotate-half rows of d / 2
// (image row's cos_h/sin_h, then column's cos_w/sin_w), from f32 copies of the image's table rows
// (a few KiB, made before the pass).
// Tasks: thd table rows in blocks of 64 positions, t rows in blocks of ~256 KiB of traffic, both fixed
// by the shape alone. Every element's value is one fixed f32 expression (no cross-lane work, and the
// scalar tail repeats the vector formula), so the bits do not depend on thread count or target.
// Arithmetic as written: no a*b+c -> fma contraction, so every target and the JIT round the same
// expressions; first line of the TU on purpose (every function, Highway's included, must carry the
// same optimize options).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif
#ifndef OPF_TUNE_STREAM_MIN_BYTES
#define OPF_TUNE_STREAM_MIN_BYTES (16 << 20)  // outputs this large bypass the cache (~ usable L3)
#endif
#ifndef OPF_FUSED_ROPE_CPU_COMMON
#define OPF_FUSED_ROPE_CPU_COMMON
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "cpu/args.h"
#include "cpu/dispatch.h"
#include "cpu/parallel.h"
#include "cpu/scratch.h"
#include "cpu/storage.h"
#include "opforge/module.h"

namespace opf::fused_rope_cpu {
// t viewed as [A, B, C, d] rows: sbhd [s, b, h, d]; thd [total, 1, h, d]. Strides in elements.
struct Rope {
  const opf_host* host;
  int32_t dtype;  // the direction is the entry's: a template argument of RopeT / Rope2dT
  int64_t A, B, C, d, d2;
  const void* in;
  int64_t is[4];
  void* out;
  int64_t os[4];
  const float* freqs;  // [positions.., d2] dense; null for the cached entries
  const void* cos;     // cached: T (or f32: cos_f32) [positions, d2] dense
  const void* sin;
  bool cos_f32;
  const int32_t* cu;  // thd: cu_seqlens [nseq + 1], validated; null for sbhd
  int64_t nseq;
  int64_t positions;     // table rows: s, or the longest thd sequence
  int64_t img_h, img_w;  // 2-D entries (img_w > 0): the image; cos/sin are then null
  const void* tab[4];    // 2-D: cos_h, sin_h, cos_w, sin_w, [rows >= image side, d / 2] dense
};
}  // namespace opf::fused_rope_cpu
#endif  // OPF_FUSED_ROPE_CPU_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/fused_rope/cpu.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/aligned_allocator.h"
#include "cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::fused_rope_cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;
using opf::cpu::from_f32;
using opf::cpu::to_f32;

using DF = hn::ScalableTag<float>;

// cos and sin of position p's d2 columns, as T values in f32. Models usually pass freqs as
// cat(f, f) (both halves the same angles): a column whose angle has the same bits as its partner's
// in the first half reuses that result, the same values for half the sincosf calls.
template <class S>
void TableRow(const Rope& a, int64_t p, float* HWY_RESTRICT cs, float* HWY_RESTRICT sn) {
  const int64_t d2 = a.d2, h = d2 / 2;
  for (int64_t i = 0; i < d2; ++i) {
    const int64_t k = p * d2 + i;
    if (a.freqs) {
      if (i >= h && std::memcmp(&a.freqs[k], &a.freqs[k - h], sizeof(float)) == 0) {
        cs[i] = cs[i - h];
        sn[i] = sn[i - h];
        continue;
      }
      float sv, cv;
      ::sincosf(a.freqs[k], &sv, &cv);
      cs[i] = to_f32(from_f32<S>(cv));
      sn[i] = to_f32(from_f32<S>(sv));
    } else if (a.cos_f32) {
      cs[i] = static_cast<const float*>(a.cos)[k];
      sn[i] = static_cast<const float*>(a.sin)[k];
    } else {
      cs[i] = to_f32(static_cast<const S*>(a.cos)[k]);
      sn[i] = to_f32(static_cast<const S*>(a.sin)[k]);
    }
  }
}

// One row: lo/hi halves of the rotary part rotated from buf into res (f32); the rest copied.
// forward:  lo' = lo c_lo - hi s_lo,  hi' = hi c_hi + lo s_hi
// backward: lo' = lo c_lo + hi s_hi,  hi' = hi c_hi - lo s_lo
// buf: the row itself (dense rows, storage Src) or its f32 gather (strided rows).
template <bool kBackward, class Src>
HWY_INLINE void RotatePair(DF df, const Src* lo_p, const Src* hi_p, const float* clo_p, const float* chi_p,
                           const float* slo_p, const float* shi_p, hn::Vec<DF>& out_lo, hn::Vec<DF>& out_hi) {
  const auto lo = LoadWiden(df, lo_p), hi = LoadWiden(df, hi_p);
  const auto clo = hn::LoadU(df, clo_p), chi = hn::LoadU(df, chi_p);
  const auto slo = hn::LoadU(df, slo_p), shi = hn::LoadU(df, shi_p);
  if constexpr (kBackward) {
    out_lo = hn::Add(hn::Mul(lo, clo), hn::Mul(hi, shi));
    out_hi = hn::Sub(hn::Mul(hi, chi), hn::Mul(lo, slo));
  } else {
    out_lo = hn::Sub(hn::Mul(lo, clo), hn::Mul(hi, slo));
    out_hi = hn::Add(hn::Mul(hi, chi), hn::Mul(lo, shi));
  }
}

template <bool kBackward, class Src>
HWY_INLINE void Rotate(const Src* HWY_RESTRICT buf, const float* HWY_RESTRICT c, const float* HWY_RESTRICT s,
                       float* HWY_RESTRICT res, size_t d, size_t d2) {
  const DF df;
  const size_t N = hn::Lanes(df), H = d2 / 2;
  const auto rotate = [&](const Src* lo_p, const Src* hi_p, const float* clo_p, const float* chi_p, const float* slo_p,
                          const float* shi_p, float* out_lo, float* out_hi) {
    const auto lo = LoadWiden(df, lo_p), hi = LoadWiden(df, hi_p);
    const auto clo = hn::LoadU(df, clo_p), chi = hn::LoadU(df, chi_p);
    const auto slo = hn::LoadU(df, slo_p), shi = hn::LoadU(df, shi_p);
    if constexpr (kBackward) {
      hn::StoreU(hn::Add(hn::Mul(lo, clo), hn::Mul(hi, shi)), df, out_lo);
      hn::StoreU(hn::Sub(hn::Mul(hi, chi), hn::Mul(lo, slo)), df, out_hi);
    } else {
      hn::StoreU(hn::Sub(hn::Mul(lo, clo), hn::Mul(hi, slo)), df, out_lo);
      hn::StoreU(hn::Add(hn::Mul(hi, chi), hn::Mul(lo, shi)), df, out_hi);
    }
  };
  size_t i = 0;
  for (; i + N <= H; i += N) rotate(buf + i, buf + H + i, c + i, c + H + i, s + i, s + H + i, res + i, res + H + i);
  // The last H % N pairs and (d - d2) % N pass-through columns: the same vector code on zero-padded
  // copies (the same bits). Not scalar loops: the compilers vectorize those again, which was a
  // sixth of this op's JIT compile time.
  constexpr size_t kMax = hn::MaxLanes(df);
  if (i < H) {
    const size_t r = H - i;
    HWY_ALIGN Src lo[kMax] = {}, hi[kMax] = {};
    HWY_ALIGN float clo[kMax] = {}, chi[kMax] = {}, slo[kMax] = {}, shi[kMax] = {}, out_lo[kMax], out_hi[kMax];
    std::memcpy(lo, buf + i, r * sizeof(Src));
    std::memcpy(hi, buf + H + i, r * sizeof(Src));
    std::memcpy(clo, c + i, r * sizeof(float));
    std::memcpy(chi, c + H + i, r * sizeof(float));
    std::memcpy(slo, s + i, r * sizeof(float));
    std::memcpy(shi, s + H + i, r * sizeof(float));
    rotate(lo, hi, clo, chi, slo, shi, out_lo, out_hi);
    std::memcpy(res + i, out_lo, r * sizeof(float));
    std::memcpy(res + H + i, out_hi, r * sizeof(float));
  }
  size_t j = d2;  // the pass-through columns, widened like the rest (rounding back is exact)
  for (; j + N <= d; j += N) hn::StoreU(LoadWiden(df, buf + j), df, res + j);
  if (j < d) {
    HWY_ALIGN Src in[kMax] = {};
    HWY_ALIGN float out[kMax];
    std::memcpy(in, buf + j, (d - j) * sizeof(Src));
    hn::Store(LoadWiden(df, in), df, out);
    std::memcpy(res + j, out, (d - j) * sizeof(float));
  }
}

// The common case, a dense row whose pairs and pass-through columns are whole groups of vectors
// (and, streaming, whose start is aligned to one): rotated straight into the output, without the
// f32 row in scratch, whose stores and reloads cost more than they save (opforge ab, old against
// new, 4096x2x32x128 rows, 1 and 2 threads): bf16 0.74-0.93x the time under GCC 12 and 0.80-0.92x
// under clang 14; f32 0.49-0.95x under clang. Not f32 under GCC: its code for this path ran
// 1.08-1.23x slower at 1 thread whatever we tried (the two loads of a pair kept in registers, the
// halves written in two passes, a prefetch); the cause was not found (this VM has no PMU).
// A group is the f32 vectors of one store: two for 16-bit storage (one whole vector, RoundPair).
template <class S>
constexpr size_t kGroup =
#ifdef OPF_HWY_PAIR_STORES
    sizeof(S) == 2 ? 2 :
#endif
                   1;
template <class S>
constexpr bool kDirect = sizeof(S) == 2 || HWY_COMPILER_CLANG != 0;

template <class S>
HWY_INLINE bool Direct(const S* y, size_t d, size_t d2, bool stream) {
  const size_t g = kGroup<S> * hn::Lanes(DF());
  if ((d2 / 2) % g != 0 || (d - d2) % g != 0) return false;
  return !stream || (kCanStream<S> && reinterpret_cast<uintptr_t>(y) % (g * sizeof(S)) == 0);
}

// Stores the group a (, b) at y: f32 as is, 16-bit storage rounded into one vector.
template <class S>
HWY_INLINE void PutGroup(DF df, hn::Vec<DF> a, hn::Vec<DF> b, S* y, bool stream) {
  if constexpr (kGroup<S> == 2) {
#ifdef OPF_HWY_PAIR_STORES
    const hn::Repartition<uint16_t, DF> d16;
    const auto w = RoundPair(df, a, b, y);
    if (stream) hn::Stream(w, d16, reinterpret_cast<uint16_t*>(y));
    else hn::StoreU(w, d16, reinterpret_cast<uint16_t*>(y));
#endif
  } else {
    (void)b;
    if constexpr (kCanStream<S>) {
      if (stream) return StreamRound(df, a, y);
    }
    StoreRound(df, a, y);
  }
}

// x and y may be the same row (in place): each group is read before it is written.
template <bool kBackward, class S>
HWY_INLINE void RotateInto(const S* x, const float* c, const float* s, S* y, size_t d, size_t d2, bool stream) {
  const DF df;
  const size_t N = hn::Lanes(df), G = kGroup<S>, H = d2 / 2;
  for (size_t i = 0; i < H; i += G * N) {
    hn::Vec<DF> lo0, hi0, lo1, hi1;
    RotatePair<kBackward>(df, x + i, x + H + i, c + i, c + H + i, s + i, s + H + i, lo0, hi0);
    lo1 = lo0, hi1 = hi0;
    if constexpr (G == 2) {
      const size_t k = i + N;
      RotatePair<kBackward>(df, x + k, x + H + k, c + k, c + H + k, s + k, s + H + k, lo1, hi1);
    }
    PutGroup(df, lo0, lo1, y + i, stream);
    PutGroup(df, hi0, hi1, y + H + i, stream);
  }
  for (size_t j = d2; j < d; j += G * N)  // pass-through columns
    PutGroup(df, LoadWiden(df, x + j), LoadWiden(df, x + j + (G - 1) * N), y + j, stream);
}

// Rows [r0, r1) of the [A, B, C] row grid. A function of its own, not the lambda's body: captured
// values would be reloaded after every float store (a float store may alias them).
// cs/sn: the whole table (thd), or null (sbhd): the rows of a position are consecutive, so each
// task computes a position's cos/sin when it reaches it, while its loads stream in (a position cut
// by a task boundary is computed twice, to the same bits).
// 2-D: rows [r0, r1) of the [b, s, h] grid; tab: f32 cos_h, sin_h [img_h, q], cos_w, sin_w [img_w, q].
struct Rows2dScratch;  // a task's row buffers (cpu/scratch.h)
struct RowsScratch;

template <class S, bool kBackward>
HWY_NOINLINE void Rows2d(const Rope& a, const float* const* tab, bool stream, int64_t r0, int64_t r1) {
  const DF df;
  const size_t N = hn::Lanes(df), d = size_t(a.d), q = d / 2;
  float* buf = opf::cpu::thread_scratch<Rows2dScratch>(2 * d + 2 * N);
  float* res = buf + d + N;
  const int64_t bc = a.B * a.C;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t ia = r / bc, ib = (r % bc) / a.C, ic = r % a.C;
    const int64_t y = ib / a.img_w, x = ib % a.img_w;
    const float *ch = tab[0] + y * int64_t(q), *sh = tab[1] + y * int64_t(q);
    const float *cw = tab[2] + x * int64_t(q), *sw = tab[3] + x * int64_t(q);
    const S* src = static_cast<const S*>(a.in) + ia * a.is[0] + ib * a.is[1] + ic * a.is[2];
    if constexpr (kDirect<S>) {
      S* dst = static_cast<S*>(a.out) + ia * a.os[0] + ib * a.os[1] + ic * a.os[2];
      if (a.is[3] == 1 && a.os[3] == 1 && Direct(dst, q, q, stream) && Direct(dst + q, q, q, stream)) {
        RotateInto<kBackward>(src, ch, sh, dst, q, q, stream);
        RotateInto<kBackward>(src + q, cw, sw, dst + q, q, q, stream);
        continue;
      }
    }
    if (a.is[3] == 1) {
      Rotate<kBackward>(src, ch, sh, res, q, q);
      Rotate<kBackward>(src + q, cw, sw, res + q, q, q);
    } else {
      for (size_t j = 0; j < d; ++j) buf[j] = to_f32(src[int64_t(j) * a.is[3]]);
      Rotate<kBackward>(static_cast<const float*>(buf), ch, sh, res, q, q);
      Rotate<kBackward>(static_cast<const float*>(buf + q), cw, sw, res + q, q, q);
    }
    S* dst = static_cast<S*>(a.out) + ia * a.os[0] + ib * a.os[1] + ic * a.os[2];
    if (a.os[3] == 1) {
      WriteRow(
          df, dst, d, stream, [&](size_t j) { return hn::LoadU(df, res + j); }, [&](size_t j) { return res[j]; });
    } else {
      for (size_t j = 0; j < d; ++j) dst[int64_t(j) * a.os[3]] = from_f32<S>(res[j]);
    }
  }
  if (stream) hwy::FlushStream();
}

// The image's rows of the four 2-D tables as f32 (T values widened, f32 ones as given).
template <class S>
void Tables2d(const Rope& a, float* out[4]) {
  const int64_t q = a.d / 2;
  for (int k = 0; k < 4; ++k) {
    const int64_t n = (k < 2 ? a.img_h : a.img_w) * q;
    if (a.cos_f32) {
      std::memcpy(out[k], a.tab[k], size_t(n) * sizeof(float));
    } else {
      const S* src = static_cast<const S*>(a.tab[k]);
      for (int64_t i = 0; i < n; ++i) out[k][i] = to_f32(src[i]);
    }
  }
}

template <class S, bool kBackward>
HWY_NOINLINE void Rows(const Rope& a, const float* cs, const float* sn, bool stream, int64_t r0, int64_t r1) {
  const DF df;
  const size_t N = hn::Lanes(df), d = size_t(a.d), d2 = size_t(a.d2);
  float* buf = opf::cpu::thread_scratch<RowsScratch>(2 * d + 2 * d2 + 4 * N);
  float* res = buf + d + N;
  float* lc = res + d + N;  // sbhd: cos/sin of position `have`
  float* ls = lc + d2 + N;
  int64_t have = -1;
  const int64_t bc = a.B * a.C;
  int64_t k = 0;  // thd: the sequence of the current token (tokens only grow within a task)
  if (a.cu) k = int64_t(std::upper_bound(a.cu, a.cu + a.nseq + 1, int32_t(r0 / bc)) - a.cu) - 1;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t ia = r / bc, ib = (r % bc) / a.C, ic = r % a.C;
    int64_t p = ia;
    if (a.cu) {
      while (a.cu[k + 1] <= ia) ++k;
      p = ia - a.cu[k];
    }
    const float* c = cs ? cs + p * a.d2 : lc;
    const float* sv = sn ? sn + p * a.d2 : ls;
    if (!cs && p != have) {
      TableRow<S>(a, p, lc, ls);
      have = p;
    }
    const S* x = static_cast<const S*>(a.in) + ia * a.is[0] + ib * a.is[1] + ic * a.is[2];
    if constexpr (kDirect<S>) {
      S* y = static_cast<S*>(a.out) + ia * a.os[0] + ib * a.os[1] + ic * a.os[2];
      if (a.is[3] == 1 && a.os[3] == 1 && Direct(y, d, d2, stream)) {
        RotateInto<kBackward>(x, c, sv, y, d, d2, stream);
        continue;
      }
    }
    if (a.is[3] == 1) {
      Rotate<kBackward>(x, c, sv, res, d, d2);
    } else {
      for (size_t j = 0; j < d; ++j) buf[j] = to_f32(x[int64_t(j) * a.is[3]]);
      Rotate<kBackward>(static_cast<const float*>(buf), c, sv, res, d, d2);
    }
    S* y = static_cast<S*>(a.out) + ia * a.os[0] + ib * a.os[1] + ic * a.os[2];
    if (a.os[3] == 1) {
      WriteRow(
          df, y, d, stream, [&](size_t j) { return hn::LoadU(df, res + j); }, [&](size_t j) { return res[j]; });
    } else {
      for (size_t j = 0; j < d; ++j) y[int64_t(j) * a.os[3]] = from_f32<S>(res[j]);
    }
  }
  if (stream) hwy::FlushStream();  // every thread orders its own streaming stores
}

// kBackward: the entry's direction, a template argument so that an entry's JIT specialization
// compiles only its own direction's rows.
template <class S, bool kBackward>
void Rope2dT(const Rope& a) {
  const int64_t q = a.d / 2;
  auto table = hwy::AllocateAligned<float>(size_t(2 * (a.img_h + a.img_w) * q + 1));
  float* tab[4] = {table.get(), table.get() + a.img_h * q, table.get() + 2 * a.img_h * q,
                   table.get() + (2 * a.img_h + a.img_w) * q};
  Tables2d<S>(a, tab);
  const float* const* t = tab;
  const int64_t rows = a.A * a.B * a.C;
  const bool stream = a.os[3] == 1 && double(rows) * double(a.d) * sizeof(S) >= double(OPF_TUNE_STREAM_MIN_BYTES);
  const int64_t chunk = opf::cpu::rows_per_task(rows, 2.0 * double(a.d) * sizeof(S));
  opf::cpu::parallel_rows(a.host, rows, chunk,
                          [&](int64_t r0, int64_t r1) { Rows2d<S, kBackward>(a, t, stream, r0, r1); });
}

template <class S, bool kBackward>
void RopeT(const Rope& a) {
  // thd: a table of the positions up to the longest sequence, shared by all sequences
  const int64_t P = a.cu ? a.positions : 0, d2 = a.d2;
  auto table = hwy::AllocateAligned<float>(size_t(2 * P * d2 + 1));
  float* cs = a.cu ? table.get() : nullptr;
  float* sn = a.cu ? cs + P * d2 : nullptr;
  opf::cpu::parallel_rows(a.host, P, 64, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) TableRow<S>(a, p, cs + p * d2, sn + p * d2);
  });
  const int64_t rows = a.A * a.B * a.C;
  const bool stream = a.os[3] == 1 && double(rows) * double(a.d) * sizeof(S) >= double(OPF_TUNE_STREAM_MIN_BYTES);
  const int64_t chunk = opf::cpu::rows_per_task(rows, 2.0 * double(a.d) * sizeof(S));
  opf::cpu::parallel_rows(a.host, rows, chunk,
                          [&](int64_t r0, int64_t r1) { Rows<S, kBackward>(a, cs, sn, stream, r0, r1); });
}

// One per entry: a JIT specialization compiles only its own entry's kernels (cpu/storage.h).
#define OPF_ROPE_ENTRY(fn, name, backward)                                                  \
  void fn(const Rope& a) {                                                                  \
    opf::cpu::run_storage<name>(a.dtype, [&](auto s) { RopeT<decltype(s), backward>(a); }); \
  }
OPF_ROPE_ENTRY(RunForward, "forward", false)
OPF_ROPE_ENTRY(RunBackward, "backward", true)
OPF_ROPE_ENTRY(RunForwardCached, "forward_cached", false)
OPF_ROPE_ENTRY(RunBackwardCached, "backward_cached", true)
OPF_ROPE_ENTRY(RunForwardCachedF32, "forward_cached_f32", false)
OPF_ROPE_ENTRY(RunBackwardCachedF32, "backward_cached_f32", true)
OPF_ROPE_ENTRY(RunForwardThd, "forward_thd", false)
OPF_ROPE_ENTRY(RunBackwardThd, "backward_thd", true)
#undef OPF_ROPE_ENTRY
#define OPF_ROPE_2D_ENTRY(fn, name, backward)                                                 \
  void fn(const Rope& a) {                                                                    \
    opf::cpu::run_storage<name>(a.dtype, [&](auto s) { Rope2dT<decltype(s), backward>(a); }); \
  }
OPF_ROPE_2D_ENTRY(RunForward2d, "forward_2d", false)
OPF_ROPE_2D_ENTRY(RunBackward2d, "backward_2d", true)
OPF_ROPE_2D_ENTRY(RunForward2dF32, "forward_2d_f32", false)
OPF_ROPE_2D_ENTRY(RunBackward2dF32, "backward_2d_f32", true)
#undef OPF_ROPE_2D_ENTRY
const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace opf::fused_rope_cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::fused_rope_cpu {
OPF_KERNEL_EXPORT(RunForward);
OPF_KERNEL_EXPORT(RunBackward);
OPF_KERNEL_EXPORT(RunForwardCached);
OPF_KERNEL_EXPORT(RunBackwardCached);
OPF_KERNEL_EXPORT(RunForwardCachedF32);
OPF_KERNEL_EXPORT(RunBackwardCachedF32);
OPF_KERNEL_EXPORT(RunForwardThd);
OPF_KERNEL_EXPORT(RunBackwardThd);
OPF_KERNEL_EXPORT(RunForward2d);
OPF_KERNEL_EXPORT(RunBackward2d);
OPF_KERNEL_EXPORT(RunForward2dF32);
OPF_KERNEL_EXPORT(RunBackward2dF32);
OPF_CPU_EXPORT_TARGET()
}  // namespace opf::fused_rope_cpu
#endif  // HWY_ONCE

#if HWY_ONCE && OPF_HOST_PART  // the host code: not in a JIT kernels module (cpu/dispatch.h)
OPF_HOST_CODE_BEGIN
namespace opf::fused_rope_cpu {
using namespace opf::cpu;

// out (argument i) must be t's shape and dtype, with non-negative strides that reach every element
// once (dims by increasing stride, each stride past the extent of the smaller ones), and must not
// share memory with t unless it is t itself (same data and strides: every row is read whole before
// it is written).
void expect_out(const Args& args, const opf_tensor& t, const opf_tensor& o, int i, const char* name) {
  if (o.dtype != t.dtype)
    failf("%s: argument %d (%s) has dtype %s, expected %s", args.entry(), i, name, dtype_str(o.dtype),
          dtype_str(t.dtype));
  if (o.ndim != t.ndim) failf("%s: argument %d (%s) has %d dims, expected %d", args.entry(), i, name, o.ndim, t.ndim);
  for (int k = 0; k < t.ndim; ++k)
    if (o.shape[k] != t.shape[k])
      failf("%s: argument %d (%s) has size %lld in dim %d, expected %lld", args.entry(), i, name, (long long)o.shape[k],
            k, (long long)t.shape[k]);
  if (numel(t) == 0) return;
  if (!o.data) failf("%s: argument %d (%s) has no data", args.entry(), i, name);
  int order[OPF_MAX_DIMS], n = 0;
  for (int k = 0; k < o.ndim; ++k)
    if (o.shape[k] > 1) {
      if (o.strides[k] <= 0)
        failf("%s: argument %d (%s) has stride %lld in dim %d; an output view needs positive strides", args.entry(), i,
              name, (long long)o.strides[k], k);
      order[n++] = k;
    }
  for (int m = 1; m < n; ++m)  // insertion sort by stride (std::sort on 6 ints trips -Warray-bounds)
    for (int q = m; q > 0 && o.strides[order[q]] < o.strides[order[q - 1]]; --q) std::swap(order[q], order[q - 1]);
  int64_t extent = 1;  // elements spanned by the dims so far
  for (int m = 0; m < n; ++m) {
    const int k = order[m];
    if (o.strides[k] < extent)
      failf("%s: argument %d (%s) overlaps itself (stride %lld in dim %d)", args.entry(), i, name,
            (long long)o.strides[k], k);
    extent += (o.shape[k] - 1) * o.strides[k];
  }
  // byte ranges of t and out
  auto range = [](const opf_tensor& x, int64_t& lo, int64_t& hi) {
    lo = hi = 0;
    for (int k = 0; k < x.ndim; ++k) {
      const int64_t span = (x.shape[k] - 1) * x.strides[k];
      (span < 0 ? lo : hi) += span;
    }
    const int64_t e = int64_t(dtype_size(DType(x.dtype)));
    lo = lo * e + int64_t(reinterpret_cast<uintptr_t>(x.data));
    hi = (hi + 1) * e + int64_t(reinterpret_cast<uintptr_t>(x.data));
  };
  int64_t tlo, thi, olo, ohi;
  range(t, tlo, thi);
  range(o, olo, ohi);
  const bool same = o.data == t.data && std::equal(o.strides, o.strides + o.ndim, t.strides);
  if (!same && olo < thi && tlo < ohi)
    failf("%s: argument %d (%s) overlaps argument 0 (%s) with another layout", args.entry(), i, name,
          args.entry()[0] == 'b' ? "grad_out" : "t");
}

// freqs / cos / sin (argument i): [rows, 1, 1, d2] of dtype, d2 even and <= d; returns d2.
int64_t expect_table(const Args& args, int i, const char* name, int32_t dtype, int64_t rows, int64_t d) {
  const opf_tensor& f = args.tensor(i, name);
  if (f.ndim != 4) failf("%s: argument %d (%s) has %d dims, expected 4 ([s, 1, 1, d2])", args.entry(), i, name, f.ndim);
  const int64_t d2 = f.shape[3];
  if (d2 % 2 != 0 || d2 > d)
    failf("%s: argument %d (%s) has %lld rotary columns; d2 must be even and at most d = %lld", args.entry(), i, name,
          (long long)d2, (long long)d);
  expect_shape(args, f, i, name, dtype, {rows < 0 ? f.shape[0] : rows, 1, 1, d2});
  return d2;
}

// cu_seqlens (argument i): i32 [B + 1], 0 = cu_0 <= cu_1 <= ... <= cu_B = total. Returns the
// longest sequence. Checked whole before anything runs: a bad offset never indexes t.
int64_t expect_cu_seqlens(const Args& args, int i, int64_t total, int64_t& nseq, const int32_t*& cu) {
  const opf_tensor& c = args.tensor(i, "cu_seqlens");
  if (c.ndim != 1 || c.shape[0] < 1)
    failf("%s: argument %d (cu_seqlens) must be a 1-D i32 tensor [B + 1] with at least one offset", args.entry(), i);
  expect_shape(args, c, i, "cu_seqlens", OPF_I32, {c.shape[0]});
  cu = static_cast<const int32_t*>(c.data);
  nseq = c.shape[0] - 1;
  if (cu[0] != 0) failf("%s: argument %d (cu_seqlens) starts at %d, expected 0", args.entry(), i, cu[0]);
  int64_t longest = 0;
  for (int64_t k = 1; k <= nseq; ++k) {
    if (cu[k] < cu[k - 1])
      failf("%s: argument %d (cu_seqlens) decreases at index %lld (%d after %d)", args.entry(), i, (long long)k, cu[k],
            cu[k - 1]);
    if (cu[k] > total)
      failf("%s: argument %d (cu_seqlens) has %d at index %lld, past the %lld tokens of t", args.entry(), i, cu[k],
            (long long)k, (long long)total);
    longest = std::max<int64_t>(longest, cu[k] - cu[k - 1]);
  }
  if (cu[nseq] != total)
    failf("%s: argument %d (cu_seqlens) ends at %d, expected the %lld tokens of t", args.entry(), i, cu[nseq],
          (long long)total);
  return longest;
}

// cos_h / sin_h / cos_w / sin_w (arguments 1 .. 4): [1, rows, 1, q] of dtype, dense; returns rows.
int64_t expect_table_2d(const Args& args, int i, const char* name, int32_t dtype, int64_t q) {
  const opf_tensor& f = args.tensor(i, name);
  if (f.ndim != 4)
    failf("%s: argument %d (%s) has %d dims, expected 4 ([1, rows, 1, d / 2])", args.entry(), i, name, f.ndim);
  expect_shape(args, f, i, name, dtype, {1, f.shape[1], 1, q});
  return f.shape[1];
}

// The 2-D entries: t [b, s, h, d], four tables, out; params img_h, img_w.
void call_2d(const opf_call* c, bool execute, bool backward, bool cos_f32) {
  const char* in_name = backward ? "grad_out" : "t";
  const char* out_name = backward ? "grad_t" : "out";
  const Args args(c, 6, 2);
  const opf_tensor& t = args.tensor(0, in_name, /*view=*/true);
  if (t.ndim != 4 || !is_float_storage(t.dtype))
    failf("%s: argument 0 (%s) must be a 4-D f32/f16/bf16 tensor [b, img_h * img_w, h, d]", args.entry(), in_name);
  if (t.data == nullptr && numel(t) > 0) failf("%s: argument 0 (%s) has no data", args.entry(), in_name);
  const int64_t d = t.shape[3];
  if (d % 4 != 0)
    failf(
        "%s: argument 0 (%s) has d = %lld; the 2-D variant needs d divisible by 4 (two halves of d / 2, "
        "each rotated half against half)",
        args.entry(), in_name, (long long)d);
  const int32_t table_dtype = cos_f32 ? int32_t(OPF_F32) : t.dtype;
  static const char* const names[4] = {"cos_h", "sin_h", "cos_w", "sin_w"};
  int64_t rows[4];
  for (int k = 0; k < 4; ++k) rows[k] = expect_table_2d(args, k + 1, names[k], table_dtype, d / 2);
  for (int k : {1, 3})
    if (rows[k] != rows[k - 1])
      failf("%s: argument %d (%s) has %lld rows, expected %lld as %s", args.entry(), k + 1, names[k],
            (long long)rows[k], (long long)rows[k - 1], names[k - 1]);
  const int64_t ph = args.i64(0, "img_h"), pw = args.i64(1, "img_w");
  if (ph < 0 || pw < 0)
    failf("%s: params img_h (%lld) and img_w (%lld) must be >= 0", args.entry(), (long long)ph, (long long)pw);
  const int64_t img_h = ph ? ph : rows[0], img_w = pw ? pw : rows[2];
  if (img_h > rows[0])
    failf("%s: argument 1 (cos_h) has %lld rows, fewer than the image's img_h = %lld", args.entry(), (long long)rows[0],
          (long long)img_h);
  if (img_w > rows[2])
    failf("%s: argument 3 (cos_w) has %lld rows, fewer than the image's img_w = %lld", args.entry(), (long long)rows[2],
          (long long)img_w);
  if (img_h * img_w != t.shape[1])
    failf(
        "%s: param img_h x img_w = %lld x %lld = %lld (0 = the table's rows) does not match argument 0 (%s)'s "
        "sequence dim %lld",
        args.entry(), (long long)img_h, (long long)img_w, (long long)img_h * (long long)img_w, in_name,
        (long long)t.shape[1]);
  const opf_tensor& o = args.tensor(5, out_name, /*view=*/true);
  expect_out(args, t, o, 5, out_name);
  if (!execute || numel(t) == 0) return;
  Rope a{};
  a.host = c->host;
  a.dtype = t.dtype;
  a.in = t.data;
  a.out = o.data;
  a.A = t.shape[0], a.B = t.shape[1], a.C = t.shape[2], a.d = d, a.d2 = d;
  for (int k = 0; k < 4; ++k) a.is[k] = t.strides[k], a.os[k] = o.strides[k];
  a.cos_f32 = cos_f32;
  a.img_h = img_h, a.img_w = img_w;
  for (int k = 0; k < 4; ++k) a.tab[k] = args.tensor(k + 1, names[k]).data;
  if (backward) {
    if (cos_f32) OPF_DISPATCH(RunBackward2dF32)(a);
    else OPF_DISPATCH(RunBackward2d)(a);
  } else {
    if (cos_f32) OPF_DISPATCH(RunForward2dF32)(a);
    else OPF_DISPATCH(RunForward2d)(a);
  }
}

void call(const opf_call* c, bool execute) {
  const std::string_view entry = c->entry ? c->entry : "";
  if (entry == "forward_2d" || entry == "backward_2d" || entry == "forward_2d_f32" || entry == "backward_2d_f32")
    return call_2d(c, execute, entry.starts_with("backward"), entry.ends_with("_f32"));
  const bool backward = entry.starts_with("backward"), cos_f32 = entry.ends_with("_cached_f32"),
             cached = cos_f32 || entry.ends_with("_cached"), thd = entry.ends_with("_thd");
  if (!(entry == "forward" || entry == "backward" || entry == "forward_cached" || entry == "backward_cached" ||
        entry == "forward_cached_f32" || entry == "backward_cached_f32" || entry == "forward_thd" ||
        entry == "backward_thd"))
    failf(
        "unknown entry '%.40s' (fused_rope has forward, backward, forward_cached, backward_cached, "
        "forward_cached_f32, backward_cached_f32, forward_thd, backward_thd, forward_2d, backward_2d, "
        "forward_2d_f32, backward_2d_f32)",
        c->entry ? c->entry : "");
  const char* in_name = backward ? "grad_out" : "t";
  const char* out_name = backward ? "grad_t" : "out";
  const Args args(c, cached || thd ? 4 : 3, 2);  // img_h, img_w: the 2-D entries' params
  const opf_tensor& t = args.tensor(0, in_name, /*view=*/true);
  const int nd = thd ? 3 : 4;
  if (t.ndim != nd || !is_float_storage(t.dtype))
    failf("%s: argument 0 (%s) must be a %d-D f32/f16/bf16 tensor %s", args.entry(), in_name, nd,
          thd ? "[total, h, d]" : "[s, b, h, d]");
  if (t.data == nullptr && numel(t) > 0) failf("%s: argument 0 (%s) has no data", args.entry(), in_name);
  Rope a{};
  a.host = c->host;
  a.dtype = t.dtype;
  a.in = t.data;
  const int64_t d = t.shape[nd - 1];
  a.d = d;
  if (thd) {
    a.A = t.shape[0], a.B = 1, a.C = t.shape[1];
    a.is[0] = t.strides[0], a.is[1] = 0, a.is[2] = t.strides[1], a.is[3] = t.strides[2];
    a.positions = expect_cu_seqlens(args, 1, t.shape[0], a.nseq, a.cu);
    a.d2 = expect_table(args, 2, "freqs", OPF_F32, -1, d);
    const int64_t rows = args.tensor(2, "freqs").shape[0];
    if (rows < a.positions)
      failf("%s: argument 2 (freqs) has %lld positions, fewer than the longest sequence in cu_seqlens (%lld)",
            args.entry(), (long long)rows, (long long)a.positions);
    a.freqs = static_cast<const float*>(args.tensor(2, "freqs").data);
  } else {
    a.A = t.shape[0], a.B = t.shape[1], a.C = t.shape[2];
    for (int k = 0; k < 4; ++k) a.is[k] = t.strides[k];
    a.positions = t.shape[0];
    if (cached) {
      const int32_t table_dtype = cos_f32 ? int32_t(OPF_F32) : t.dtype;
      a.cos_f32 = cos_f32;
      a.d2 = expect_table(args, 1, "cos", table_dtype, a.A, d);
      if (expect_table(args, 2, "sin", table_dtype, a.A, d) != a.d2)
        failf("%s: argument 2 (sin) has %lld columns, expected %lld as cos", args.entry(),
              (long long)args.tensor(2, "sin").shape[3], (long long)a.d2);
      a.cos = args.tensor(1, "cos").data;
      a.sin = args.tensor(2, "sin").data;
    } else {
      a.d2 = expect_table(args, 1, "freqs", OPF_F32, a.A, d);
      a.freqs = static_cast<const float*>(args.tensor(1, "freqs").data);
    }
  }
  const int oi = cached || thd ? 3 : 2;
  const opf_tensor& o = args.tensor(oi, out_name, /*view=*/true);
  expect_out(args, t, o, oi, out_name);
  a.out = o.data;
  if (thd) {
    a.os[0] = o.strides[0], a.os[1] = 0, a.os[2] = o.strides[1], a.os[3] = o.strides[2];
  } else {
    for (int k = 0; k < 4; ++k) a.os[k] = o.strides[k];
  }
  if (!execute || numel(t) == 0) return;
  if (backward) {
    if (thd) OPF_DISPATCH(RunBackwardThd)(a);
    else if (cos_f32) OPF_DISPATCH(RunBackwardCachedF32)(a);
    else if (cached) OPF_DISPATCH(RunBackwardCached)(a);
    else OPF_DISPATCH(RunBackward)(a);
  } else {
    if (thd) OPF_DISPATCH(RunForwardThd)(a);
    else if (cos_f32) OPF_DISPATCH(RunForwardCachedF32)(a);
    else if (cached) OPF_DISPATCH(RunForwardCached)(a);
    else OPF_DISPATCH(RunForward)(a);
  }
}

}  // namespace opf::fused_rope_cpu

OPF_DEFINE_MODULE("fused_rope", "cpu", opf::fused_rope_cpu::isa(), opf::fused_rope_cpu::call)
OPF_HOST_CODE_END
#endif  // HWY_ONCE
