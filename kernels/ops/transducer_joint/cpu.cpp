// transducer_joint — CPU module (contract, incl. the -1 don't-care rule and the sum orders: ref.cpp).
// Highway SIMD: prebuilt modules dispatch on the running CPU; the JIT builds only the host target.
//   forward: tasks are blocks of (b, t) rows (cpu/parallel.h); each writes its U output rows once
//            from f's row (hot) and g's rows of batch b (B*U*H, cache-resident for the usual sizes):
//            h is the only large stream, written once, with the ReLU and the -1 fill in the same pass
//            (streaming stores from stream_min_bytes on).
//   backward: one pass over the valid grad_h rows. Tasks are (b, column block): the task walks
//            t ascending, u ascending over its columns, keeping grad_f's row sum and grad_g's U
//            row sums in f32 (at most ~256 KiB, in L2; whole rows of grad_h for the usual U x H, so the
//            valid rows are read as contiguous runs), so every sum runs in the contract's
//            order whatever the task split, and the bits do not depend on the thread count. The
//            column block depends on U and H alone.
// The ReLU mask of the backward is recomputed from f + g (one add, same sign as the forward's sum):
// f and g are T + U rows per batch instead of a saved [B, T, U] mask or h.
// Dropout reads the caller's u8 keep mask in the same pass, at the positions of the valid h /
// grad_h elements (1 byte beside each 2- or 4-byte element): a multiply by 0 or scale per element;
// without dropout the mask is not touched and the code is the same as before (no multiply by 1).
// dropout_mask: tasks are blocks of (b, t) rows as in the forward; every element's bit comes from
// its own Philox counter (the packed element number), so neither the split nor the layout
// changes a bit. Scalar: the mask is a 1-byte stream, Philox's ten rounds per 4 elements cost
// about as much as writing them.
// First line of the TU on purpose, as every op's: the JIT recognises it and compiles with the
// precompiled header built with the same option (dropout multiplies the sum: no FMA may fuse them).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif
#ifndef OPF_TUNE_COLUMN_BLOCK
#define OPF_TUNE_COLUMN_BLOCK 1024  // widest backward column block (grad_g sums: U x this f32)
#endif
#ifndef OPF_TUNE_STREAM_MIN_BYTES
#define OPF_TUNE_STREAM_MIN_BYTES 33554432  // h at least this large: written with streaming stores
#endif
#ifndef OPF_TRANSDUCER_JOINT_CPU_COMMON
#define OPF_TRANSDUCER_JOINT_CPU_COMMON
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "cpu/args.h"
#include "cpu/dispatch.h"
#include "cpu/parallel.h"
#include "cpu/scratch.h"
#include "cpu/storage.h"
#include "cpu/variant.h"
#include "opforge/module.h"

namespace opf::transducer_joint_cpu {
// What both entries share: sizes, lengths, and where (b, t, u)'s row of h / grad_h is.
struct Layout {
  int64_t nb, nt, nu, nh;
  const int32_t* f_len;
  const int32_t* g_len;
  const int64_t* offset;  // batch_offset (inclusive cumsum), read only when packed
  bool packed;
  // first row of batch b's (t, u) block; packed rows of b are t * g_len[b] + u from there
  int64_t batch_row(int64_t b) const { return packed ? (b ? offset[b - 1] : 0) : b * nt * nu; }
  int64_t row_stride_t(int64_t b) const { return packed ? g_len[b] : nu; }
};
// mask: the keep mask in h's layout, null without dropout; scale: the kept elements' factor
struct Forward {
  const opf_host* host;
  int32_t dtype;
  Layout l;
  bool relu;
  const void* f;
  const void* g;
  const uint8_t* mask;
  float scale;
  void* h;
};
struct Backward {
  const opf_host* host;
  int32_t dtype;
  Layout l;
  bool relu;
  const uint8_t* mask;
  float scale;
  const void* dh;
  const void* f;
  const void* g;
  void* df;
  void* dg;
};
// the dropout_mask entry: keep = (1 - p) 2^32
struct DropoutMask {
  const opf_host* host;
  int32_t dtype;
  Layout l;
  uint64_t seed;
  double keep;
  uint8_t* mask;
};
}  // namespace opf::transducer_joint_cpu
#endif  // OPF_TRANSDUCER_JOINT_CPU_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/transducer_joint/cpu.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::transducer_joint_cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;
using opf::cpu::from_f32;
using opf::cpu::to_f32;

// The dropout factors of m[0, lanes): scale where the keep mask is nonzero, else 0.
template <class D>
HWY_INLINE hn::Vec<D> KeepFactor(D d, const uint8_t* HWY_RESTRICT m, hn::Vec<D> scale) {
  const hn::Rebind<uint8_t, D> d8;
  const hn::RebindToUnsigned<D> du;
  const auto bytes = hn::PromoteTo(du, hn::LoadU(d8, m));
  return hn::IfThenElseZero(hn::RebindMask(d, hn::Ne(bytes, hn::Zero(du))), scale);
}

// y[c] = f[c] + g[c], ReLU'd as the contract says (NaN kept: the compare is false for it), times
// the dropout factor with kDrop (a multiply, so a dropped NaN stays NaN, as torch's dropout).
// stream: non-temporal stores (an h beyond the cache is not read back soon; no read-for-ownership).
template <bool kRelu, bool kDrop, class S>
HWY_INLINE void AddRow(const S* HWY_RESTRICT f, const S* HWY_RESTRICT g, const uint8_t* HWY_RESTRICT m, float scale,
                       S* HWY_RESTRICT y, size_t n, bool stream) {
  const hn::ScalableTag<float> d;
  const auto zero = hn::Zero(d);
  const auto vscale = hn::Set(d, scale);
  WriteRow(
      d, y, n, stream,
      [&](size_t c) {
        auto s = hn::Add(LoadWiden(d, f + c), LoadWiden(d, g + c));
        if constexpr (kRelu) s = hn::IfThenZeroElse(hn::Lt(s, zero), s);
        if constexpr (kDrop) s = hn::Mul(s, KeepFactor(d, m + c, vscale));
        return s;
      },
      [&](size_t c) {
        float s = to_f32(f[c]) + to_f32(g[c]);
        if (kRelu && s < 0.0f) s = 0.0f;
        if (kDrop) s = s * (m[c] ? scale : 0.0f);
        return s;
      });
}

template <class S>
HWY_INLINE void FillRow(S* HWY_RESTRICT y, size_t n, float v, bool stream = false) {
  const hn::ScalableTag<float> d;
  const auto vv = hn::Set(d, v);
  WriteRow(
      d, y, n, stream, [&](size_t) { return vv; }, [&](size_t) { return v; });
}

template <bool kRelu, bool kDrop, class S>
void ForwardRows(const Forward& a, int64_t r0, int64_t r1, bool stream) {
  const Layout& l = a.l;
  const size_t nh = size_t(l.nh);
  const S* f = static_cast<const S*>(a.f);
  const S* g = static_cast<const S*>(a.g);
  S* h = static_cast<S*>(a.h);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t b = r / l.nt, t = r % l.nt, lf = l.f_len[b], lg = l.g_len[b];
    if (l.packed && t >= lf) continue;                                      // packed: no rows
    const int64_t first = (l.batch_row(b) + t * l.row_stride_t(b)) * l.nh;  // element of (b, t, 0, 0)
    S* out = h + first;
    if (t >= lf) {  // unpacked, all U rows don't-care
      FillRow(out, size_t(l.nu) * nh, -1.0f, stream);
      continue;
    }
    const S* fr = f + r * l.nh;
    const S* gb = g + b * l.nu * l.nh;
    const uint8_t* m = kDrop ? a.mask + first : nullptr;
    for (int64_t u = 0; u < lg; ++u)
      AddRow<kRelu, kDrop>(fr, gb + u * l.nh, kDrop ? m + u * l.nh : nullptr, a.scale, out + u * l.nh, nh, stream);
    if (!l.packed && lg < l.nu) FillRow(out + lg * l.nh, size_t(l.nu - lg) * nh, -1.0f, stream);
  }
  if (stream) hwy::FlushStream();  // every thread orders its own streaming stores
}

template <class S, bool kRelu, bool kDrop>
void ForwardT(const Forward& a) {
  const Layout& l = a.l;
  const int64_t rows = l.nb * l.nt;
  const int64_t chunk = opf::cpu::rows_per_task(rows, double(l.nu + 1) * double(l.nh) * sizeof(S));
  const int64_t out_rows = l.packed ? (l.nb ? l.offset[l.nb - 1] : 0) : rows * l.nu;
  const bool stream = double(out_rows) * double(l.nh) * sizeof(S) >= double(OPF_TUNE_STREAM_MIN_BYTES);
  opf::cpu::parallel_rows(a.host, rows, chunk,
                          [&](int64_t r0, int64_t r1) { ForwardRows<kRelu, kDrop, S>(a, r0, r1, stream); });
}

// Columns of one backward task: grad_g's U sums of this width stay within ~256 KiB of f32 (L2), a
// multiple of 16 (a whole AVX-512 vector), at most OPF_TUNE_COLUMN_BLOCK. Shape alone decides it.
inline int64_t column_block(int64_t nu, int64_t nh) {
  const int64_t fit = std::max<int64_t>(16, (65536 / std::max<int64_t>(nu, 1)) / 16 * 16);
  return std::max<int64_t>(1, std::min({nh, fit, int64_t(OPF_TUNE_COLUMN_BLOCK)}));
}

// acc[c] += x[c] and sum[c] += x[c] over c < w, x = dh times the dropout factor (kDrop), then
// zeroed where f + g <= 0 with relu
template <bool kRelu, bool kDrop, class S>
HWY_INLINE void AccumulateRow(const S* HWY_RESTRICT dh, const S* HWY_RESTRICT f, const S* HWY_RESTRICT g,
                              const uint8_t* HWY_RESTRICT m, float scale, float* HWY_RESTRICT af,
                              float* HWY_RESTRICT ag, size_t w) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto zero = hn::Zero(d);
  const auto vscale = hn::Set(d, scale);
  size_t c = 0;
  for (; c + N <= w; c += N) {
    auto x = LoadWiden(d, dh + c);
    if constexpr (kDrop) x = hn::Mul(x, KeepFactor(d, m + c, vscale));
    if constexpr (kRelu) x = hn::IfThenZeroElse(hn::Le(hn::Add(LoadWiden(d, f + c), LoadWiden(d, g + c)), zero), x);
    hn::StoreU(hn::Add(hn::LoadU(d, af + c), x), d, af + c);
    hn::StoreU(hn::Add(hn::LoadU(d, ag + c), x), d, ag + c);
  }
  OPF_SCALAR_LOOP
  for (; c < w; ++c) {
    float x = to_f32(dh[c]);
    if (kDrop) x = x * (m[c] ? scale : 0.0f);
    if (kRelu && to_f32(f[c]) + to_f32(g[c]) <= 0.0f) x = 0.0f;
    af[c] = af[c] + x;
    ag[c] = ag[c] + x;
  }
}

template <class S>
HWY_INLINE void StoreSums(const float* HWY_RESTRICT acc, S* HWY_RESTRICT y, size_t w) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t c = 0;
  for (; c + N <= w; c += N) StoreRound(d, hn::LoadU(d, acc + c), y + c);
  OPF_SCALAR_LOOP
  for (; c < w; ++c) y[c] = from_f32<S>(acc[c]);
}

// A task's f32 sums: slot 0 the dg rows of the block, slot 1 one df row. Thread scratch, not a
// vector per task (cpu/scratch.h says why): issue 13's A/A runs read this backward 1.17-1.50x apart
// between the two processes of a pair, depending on which was started first.
struct BackwardScratch;

template <bool kRelu, bool kDrop, class S>
void BackwardTask(const Backward& a, int64_t b, int64_t c0, size_t w) {
  const Layout& l = a.l;
  const int64_t nh = l.nh, lf = l.f_len[b], lg = l.g_len[b];
  const S* dh = static_cast<const S*>(a.dh) + l.batch_row(b) * nh + c0;
  const uint8_t* m = kDrop ? a.mask + l.batch_row(b) * nh + c0 : nullptr;
  const S* f = static_cast<const S*>(a.f) + b * l.nt * nh + c0;
  const S* g = static_cast<const S*>(a.g) + b * l.nu * nh + c0;
  S* df = static_cast<S*>(a.df) + b * l.nt * nh + c0;
  S* dg = static_cast<S*>(a.dg) + b * l.nu * nh + c0;
  const int64_t st = l.row_stride_t(b);
  const size_t ng = size_t(std::max<int64_t>(lg, 0)) * w;
  float* const ag = opf::cpu::thread_scratch<BackwardScratch, 2>(ng, 0);
  float* const af = opf::cpu::thread_scratch<BackwardScratch, 2>(w, 1);
  std::fill(ag, ag + ng, 0.0f);
  for (int64_t t = 0; t < lf; ++t) {
    std::fill(af, af + w, 0.0f);
    for (int64_t u = 0; u < lg; ++u)
      AccumulateRow<kRelu, kDrop>(dh + (t * st + u) * nh, f + t * nh, g + u * nh,
                                  kDrop ? m + (t * st + u) * nh : nullptr, a.scale, af, ag + size_t(u) * w, w);
    StoreSums(af, df + t * nh, w);
  }
  for (int64_t t = lf; t < l.nt; ++t) FillRow(df + t * nh, w, 0.0f);
  for (int64_t u = 0; u < lg; ++u) StoreSums(ag + size_t(u) * w, dg + u * nh, w);
  for (int64_t u = lg; u < l.nu; ++u) FillRow(dg + u * nh, w, 0.0f);
}

template <class S, bool kRelu, bool kDrop>
void BackwardT(const Backward& a) {
  const Layout& l = a.l;
  if (l.nh == 0) return;
  const int64_t cb = column_block(l.nu, l.nh), blocks = (l.nh + cb - 1) / cb;
  opf::cpu::parallel_for(a.host, l.nb * blocks, [&](int64_t task) {
    const int64_t b = task / blocks, c0 = (task % blocks) * cb;
    BackwardTask<kRelu, kDrop, S>(a, b, c0, size_t(std::min(cb, l.nh - c0)));
  });
}

// Four kernels per entry and dtype (relu x dropout), of which a call runs one: a JIT module
// compiles that one (manifest jit_variant; cpu/variant.h run_flag).
template <class F>
void RunVariant(bool relu, bool drop, F&& f) {
  opf::cpu::run_flag<"relu">(relu, [&](auto r) { opf::cpu::run_flag<"dropout_prob">(drop, [&](auto d) { f(r, d); }); });
}
void RunForward(const Forward& a) {
  opf::cpu::run_storage<"forward">(a.dtype, [&](auto s) {
    RunVariant(a.relu, a.mask != nullptr,
               [&](auto r, auto d) { ForwardT<decltype(s), decltype(r)::value, decltype(d)::value>(a); });
  });
}
void RunBackward(const Backward& a) {
  opf::cpu::run_storage<"backward">(a.dtype, [&](auto s) {
    RunVariant(a.relu, a.mask != nullptr,
               [&](auto r, auto d) { BackwardT<decltype(s), decltype(r)::value, decltype(d)::value>(a); });
  });
}
// Philox4x32-10 (Salmon, Moraes, Dror, Shaw 2011): the 4 words of counter {block, 0}, key `key`.
struct PhiloxBlock {
  uint32_t w[4];
};
inline PhiloxBlock philox(uint64_t block, uint64_t key) {
  uint32_t c0 = uint32_t(block), c1 = uint32_t(block >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t a = uint64_t(0xD2511F53u) * c0, b = uint64_t(0xCD9E8D57u) * c2;
    const uint32_t n0 = uint32_t(b >> 32) ^ c1 ^ k0, n2 = uint32_t(a >> 32) ^ c3 ^ k1;
    c1 = uint32_t(b);
    c3 = uint32_t(a);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;  // Weyl key schedule
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// The keep mask of the contract: element n (packed numbering) kept when its Philox word is below
// keep = (1 - p) 2^32; unpacked don't-care rows 0.
void GenerateMask(const opf_host* host, const Layout& l, uint64_t seed, double keep, uint8_t* mask) {
  std::vector<int64_t> base(size_t(l.nb), 0);  // packed first row of b, also when h is unpacked
  for (int64_t b = 1; b < l.nb; ++b) base[size_t(b)] = base[size_t(b - 1)] + int64_t(l.f_len[b - 1]) * l.g_len[b - 1];
  const int64_t rows = l.nb * l.nt, nh = l.nh;
  const int64_t chunk = opf::cpu::rows_per_task(rows, double(l.nu) * double(nh));
  opf::cpu::parallel_rows(host, rows, chunk, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / l.nt, t = r % l.nt, lf = l.f_len[b], lg = l.g_len[b];
      if (l.packed && t >= lf) continue;
      uint8_t* out = mask + (l.batch_row(b) + t * l.row_stride_t(b)) * nh;
      if (t >= lf) {
        std::memset(out, 0, size_t(l.nu * nh));
        continue;
      }
      const uint64_t n0 = uint64_t((base[size_t(b)] + t * lg) * nh), len = uint64_t(lg * nh);
      PhiloxBlock blk = philox(n0 / 4, seed);
      for (uint64_t i = 0; i < len; ++i) {
        const uint64_t n = n0 + i;
        if (n % 4 == 0) blk = philox(n / 4, seed);
        out[i] = double(blk.w[n % 4]) < keep ? 1 : 0;
      }
      if (!l.packed && lg < l.nu) std::memset(out + lg * nh, 0, size_t((l.nu - lg) * nh));
    }
  });
}
// A kernel, not host code: the dropout_mask pair's JIT module holds it (cpu/dispatch.h).
void RunDropoutMask(const DropoutMask& a) {
  opf::cpu::run_storage<"dropout_mask">(a.dtype, [&](auto) { GenerateMask(a.host, a.l, a.seed, a.keep, a.mask); });
}
const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace opf::transducer_joint_cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::transducer_joint_cpu {
OPF_KERNEL_EXPORT(RunForward);
OPF_KERNEL_EXPORT(RunBackward);
OPF_KERNEL_EXPORT(RunDropoutMask);
OPF_CPU_EXPORT_TARGET()
}  // namespace opf::transducer_joint_cpu
#endif  // HWY_ONCE

#if HWY_ONCE && OPF_HOST_PART  // the host code: not in a JIT kernels module (cpu/dispatch.h)
OPF_HOST_CODE_BEGIN
namespace opf::transducer_joint_cpu {
using namespace opf::cpu;

// f [B, T, H] (argument fi) and g [B, U, H] (argument fi + 1), the lengths and batch_offset
// (arguments li .. li + 2): checked, the lengths' values included, before anything is written.
// Returns the layout; rows = the packed row count (batch_offset[B-1], 0 for B = 0).
Layout check_inputs(const Args& args, int fi, int li, bool packed, int64_t& rows) {
  const char* e = args.entry();
  const opf_tensor& f = expect_lead(args, fi, "f", 3, "[B, T, H]");
  const opf_tensor& g = args.tensor(fi + 1, "g");
  if (g.ndim != 3) failf("%s: argument %d (g) has %d dims, expected 3 ([B, U, H])", e, fi + 1, g.ndim);
  const int64_t nb = f.shape[0], nt = f.shape[1], nh = f.shape[2], nu = g.shape[1];
  expect_shape(args, g, fi + 1, "g", f.dtype, {nb, nu, nh});
  if (nb * nt * nh > 0 && !f.data) failf("%s: argument %d (f) has no data", e, fi);
  const auto* fl = static_cast<const int32_t*>(expect_arg(args, li, "f_len", OPF_I32, {nb}).data);
  const auto* gl = static_cast<const int32_t*>(expect_arg(args, li + 1, "g_len", OPF_I32, {nb}).data);
  const auto* off = static_cast<const int64_t*>(expect_arg(args, li + 2, "batch_offset", OPF_I64, {nb}).data);
  for (int64_t b = 0; b < nb; ++b) {
    if (fl[b] < 0 || fl[b] > nt)
      failf("%s: f_len[%lld] = %d is outside [0, %lld] (T of f)", e, (long long)b, fl[b], (long long)nt);
    if (gl[b] < 0 || gl[b] > nu)
      failf("%s: g_len[%lld] = %d is outside [0, %lld] (U of g)", e, (long long)b, gl[b], (long long)nu);
  }
  rows = 0;
  if (packed)
    for (int64_t b = 0; b < nb; ++b) {
      rows += int64_t(fl[b]) * gl[b];
      if (off[b] != rows)
        failf("%s: batch_offset[%lld] = %lld, expected %lld (the cumsum of f_len * g_len)", e, (long long)b,
              (long long)off[b], (long long)rows);
    }
  return Layout{nb, nt, nu, nh, fl, gl, off, packed};
}

// h / grad_h (argument i): [rows, H] packed, [B, T, U, H] unpacked
const opf_tensor& expect_joint(const Args& args, int i, const char* name, int32_t dtype, const Layout& l,
                               int64_t rows) {
  if (l.packed) return expect_arg(args, i, name, dtype, {rows, l.nh});
  return expect_arg(args, i, name, dtype, {l.nb, l.nt, l.nu, l.nh});
}

// dropout_prob (param i): in [0, 1); the f32 scale of a kept element, 1 / (1 - p) rounded once.
float dropout_scale(const Args& args, int i, double& p) {
  p = args.f64(i, "dropout_prob");
  if (!(p >= 0.0 && p < 1.0)) failf("%s: param dropout_prob = %g is outside [0, 1)", args.entry(), p);
  return float(1.0 / (1.0 - p));
}

// The keep mask (argument i): u8 in h's layout when p > 0 (returned); with p = 0 it is not read
// (null returned) and may also be empty, [0].
const uint8_t* expect_mask(const Args& args, int i, double p, const Layout& l, int64_t rows) {
  const opf_tensor& m = args.tensor(i, "mask");
  if (p == 0 && m.ndim == 1) {
    expect_shape(args, m, i, "mask", OPF_U8, {0});
    return nullptr;
  }
  const int32_t ndim = l.packed ? 2 : 4;
  if (m.ndim != ndim)
    failf("%s: argument %d (mask) has %d dims, expected %d (h's layout %s: dropout_prob > 0 reads it)", args.entry(), i,
          m.ndim, ndim, l.packed ? "[rows, H]" : "[B, T, U, H]");
  const void* data = expect_joint(args, i, "mask", OPF_U8, l, rows).data;
  return p > 0 ? static_cast<const uint8_t*>(data) : nullptr;
}

void call(const opf_call* c, bool execute) {
  const std::string_view entry = c->entry ? c->entry : "";
  int64_t rows = 0;
  if (entry == "forward") {
    const Args args(c, 7, 4);
    const bool relu = args.flag(0, "relu"), packed = args.flag(1, "packed");
    double p = 0;
    const float scale = dropout_scale(args, 2, p);
    const Layout l = check_inputs(args, 0, 2, packed, rows);
    const opf_tensor& f = args.tensor(0, "f");
    const uint8_t* mask = expect_mask(args, 5, p, l, rows);
    void* h = expect_joint(args, 6, "h", f.dtype, l, rows).data;
    if (!execute || l.nb * l.nt * l.nh == 0) return;
    OPF_DISPATCH(RunForward)
    (Forward{c->host, f.dtype, l, relu, f.data, args.tensor(1, "g").data, mask, scale, h});
  } else if (entry == "backward") {
    const Args args(c, 9, 4);
    const bool relu = args.flag(0, "relu"), packed = args.flag(1, "packed");
    double p = 0;
    const float scale = dropout_scale(args, 2, p);
    const Layout l = check_inputs(args, 1, 3, packed, rows);
    const opf_tensor& f = args.tensor(1, "f");
    const void* dh = expect_joint(args, 0, "grad_h", f.dtype, l, rows).data;
    const uint8_t* mask = expect_mask(args, 6, p, l, rows);
    void* df = expect_arg(args, 7, "grad_f", f.dtype, {l.nb, l.nt, l.nh}).data;
    void* dg = expect_arg(args, 8, "grad_g", f.dtype, {l.nb, l.nu, l.nh}).data;
    if (!execute || l.nb * l.nh == 0) return;
    OPF_DISPATCH(RunBackward)
    (Backward{c->host, f.dtype, l, relu, mask, scale, dh, f.data, args.tensor(2, "g").data, df, dg});
  } else if (entry == "dropout_mask") {
    const Args args(c, 6, 4);
    const bool packed = args.flag(1, "packed");
    double p = 0;
    dropout_scale(args, 2, p);
    const int64_t seed = args.i64(3, "seed");
    const Layout l = check_inputs(args, 0, 2, packed, rows);
    const opf_tensor& f = args.tensor(0, "f");
    void* mask = expect_joint(args, 5, "mask", OPF_U8, l, rows).data;
    if (!execute || l.nb * l.nt * l.nh == 0) return;
    OPF_DISPATCH(RunDropoutMask)
    (DropoutMask{c->host, f.dtype, l, uint64_t(seed), (1.0 - p) * 4294967296.0, static_cast<uint8_t*>(mask)});
  } else {
    failf("unknown entry '%.40s' (transducer_joint has forward, backward, dropout_mask)", c->entry ? c->entry : "");
  }
}

}  // namespace opf::transducer_joint_cpu

OPF_DEFINE_MODULE("transducer_joint", "cpu", opf::transducer_joint_cpu::isa(), opf::transducer_joint_cpu::call)
OPF_HOST_CODE_END
#endif  // HWY_ONCE
