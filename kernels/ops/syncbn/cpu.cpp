// syncbn — CPU module (contract: ref.cpp). Highway SIMD: prebuilt modules dispatch on the running
// CPU; the JIT builds only the host target.
// Reductions (welford, backward_reduce) read x (and dy) once from memory, in pieces of at most
// OPF_TUNE_PIECE elements that stay in L1/L2: NCHW a piece is a stretch of one (n, c) row, channels
// last a block of whole rows (all channels at once, one SIMD lane per channel).
//   welford: a piece's statistics are two passes over the cached piece, sum -> f32 mean mf, then
//            sum (x - mf) and sum (x - mf)^2, which give the piece's mean and M2 without the
//            cancellation of sum x^2 - n mean^2; pieces are Chan-merged in f64.
//   backward_reduce: f32 sums over a piece, added in f64.
// Pieces are grouped into at most 64 slots whose boundaries depend only on the shape (NCHW: blocks
// of images, channels last: blocks of pieces); tasks fill slots (NCHW also splits channels), and
// the slots are merged per channel in slot order: the same bits for any thread count.
// forward, backward_elemt and relu_backward are elementwise with per-channel constants, rows split
// into tasks. The channels-last forward adds the residual z and applies the ReLU in the same pass;
// relu_backward recomputes that pre-ReLU value with the forward's exact f32 formula (operand for
// operand, vector body and scalar tail alike), so its mask is exactly where the forward wrote 0.
// Arithmetic as written: no implicit a*b+c -> fma contraction, so that a row's vector body and its
// scalar head/tail round alike; first line of the TU on purpose (every function, Highway's
// included, must carry the same optimize options).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif
#ifndef OPF_TUNE_STREAM_MIN_BYTES
#define OPF_TUNE_STREAM_MIN_BYTES (16 << 20)  // outputs this large bypass the cache (~ usable L3)
#endif
#ifndef OPF_TUNE_PIECE
#define OPF_TUNE_PIECE 8192  // elements per reduction piece (32 KiB of f32: L1/L2)
#endif
#ifndef OPF_SYNCBN_CPU_COMMON
#define OPF_SYNCBN_CPU_COMMON
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

namespace opf::syncbn_cpu {

// One call of a data entry. Channels last: x is [n, ch] (n = N*HW rows) and hw = 1.
struct Call {
  const opf_host* host;
  int32_t dtype;
  bool last;
  int64_t n, ch, hw;
  const void* x;
  const void* dy;
  const void* z;  // channels-last forward / relu_backward: the residual, or null
  bool relu;      // channels-last forward: fuse_relu
  const float* mean;
  const float* invstd;
  const float* weight;
  const float* bias;
  const float* sum_dy;
  const float* sum_dy_xmu;
  double count;  // backward_elemt: the all-shard count
  void* out;     // y, dx or dy_masked
  float* o[4];   // welford: mean, var_biased; backward_reduce: sum_dy, sum_dy_xmu, grad_weight, grad_bias
};

// Chan's merge of (nb, mb, m2b) into (n, mean, m2). An empty side changes nothing.
inline void chan_merge(double& n, double& mean, double& m2, double nb, double mb, double m2b) {
  if (nb == 0) return;
  if (n == 0) {
    n = nb, mean = mb, m2 = m2b;
    return;
  }
  const double t = n + nb, d = mb - mean;
  mean += d * (nb / t);
  m2 += m2b + d * d * (n * nb / t);
  n = t;
}

// Slots of a reduction: `slots` blocks of `per` consecutive units (images or pieces), at most 64.
struct Slots {
  int64_t per, count;
};
inline Slots slots_of(int64_t units) {
  const int64_t per = std::max<int64_t>(1, (units + 63) / 64);
  return {per, std::max<int64_t>(1, (units + per - 1) / per)};
}

// Rows of a channels-last piece: about OPF_TUNE_PIECE elements, at least one row.
inline int64_t piece_rows(int64_t ch) { return std::max<int64_t>(1, OPF_TUNE_PIECE / std::max<int64_t>(ch, 1)); }

// NCHW tasks split channels in blocks of this many (any constant: channels are independent).
constexpr int64_t kChannelBlock = 16;

}  // namespace opf::syncbn_cpu
#endif  // OPF_SYNCBN_CPU_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/syncbn/cpu.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/aligned_allocator.h"
#include "cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::syncbn_cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;
using opf::cpu::from_f32;
using opf::cpu::to_f32;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using DD = hn::ScalableTag<double>;
using VD = hn::Vec<DD>;

// ---------------------------------------------------------------- NCHW pieces (one row stretch)
// Statistics of p[0, len), len >= 1, merged into (n, mean, m2).
template <class S>
HWY_INLINE void PieceWelford(const S* HWY_RESTRICT p, size_t len, double& n, double& mean, double& m2) {
  const DF d;
  const size_t N = hn::Lanes(d);
  VF s0 = hn::Zero(d), s1 = hn::Zero(d);
  size_t j = 0;
  for (; j + 2 * N <= len; j += 2 * N) {
    s0 = hn::Add(s0, LoadWiden(d, p + j));
    s1 = hn::Add(s1, LoadWiden(d, p + j + N));
  }
  for (; j + N <= len; j += N) s0 = hn::Add(s0, LoadWiden(d, p + j));
  float sum = SumLanes(d, hn::Add(s0, s1));
  OPF_SCALAR_LOOP
  for (; j < len; ++j) sum += to_f32(p[j]);
  const float mf = sum / float(len);
  const VF vm = hn::Set(d, mf);
  VF a1 = hn::Zero(d), a2 = hn::Zero(d);
  for (j = 0; j + N <= len; j += N) {
    const VF dv = hn::Sub(LoadWiden(d, p + j), vm);
    a1 = hn::Add(a1, dv);
    a2 = hn::Add(a2, hn::Mul(dv, dv));
  }
  float t1 = SumLanes(d, a1), t2 = SumLanes(d, a2);
  OPF_SCALAR_LOOP
  for (; j < len; ++j) {
    const float dv = to_f32(p[j]) - mf;
    t1 += dv;
    t2 += dv * dv;
  }
  const double nb = double(len), c = double(t1);
  double m2b = double(t2) - c * c / nb;
  if (m2b < 0) m2b = 0;  // rounding only; a NaN stays
  chan_merge(n, mean, m2, nb, double(mf) + c / nb, m2b);
}

// sum dy and sum dy (x - m) over [0, len), added to s, sx.
template <class S>
HWY_INLINE void PieceReduce(const S* HWY_RESTRICT g, const S* HWY_RESTRICT x, size_t len, float m, double& s,
                            double& sx) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const VF vm = hn::Set(d, m);
  VF a0 = hn::Zero(d), a1 = hn::Zero(d);
  size_t j = 0;
  for (; j + N <= len; j += N) {
    const VF gv = LoadWiden(d, g + j);
    a0 = hn::Add(a0, gv);
    a1 = hn::Add(a1, hn::Mul(gv, hn::Sub(LoadWiden(d, x + j), vm)));
  }
  float t0 = SumLanes(d, a0), t1 = SumLanes(d, a1);
  OPF_SCALAR_LOOP
  for (; j < len; ++j) {
    const float gv = to_f32(g[j]);
    t0 += gv;
    t1 += gv * (to_f32(x[j]) - m);
  }
  s += double(t0);
  sx += double(t1);
}

// Per-slot f64 accumulators, [slot][channel] x 3.
struct Acc {
  std::vector<double> a, b, c;
  Acc(int64_t slots, int64_t ch) : a(size_t(slots * ch), 0.0), b(a), c(a) {}
};

// NCHW: task (slot, channel block) over the slot's images.
template <class Body>
void ForNchwTasks(const Call& k, Slots sl, Body&& body) {
  const int64_t cblocks = (k.ch + kChannelBlock - 1) / kChannelBlock;
  opf::cpu::parallel_for(k.host, sl.count * cblocks, [&](int64_t t) {
    const int64_t s = t / cblocks, cb = t % cblocks;
    const int64_t n0 = s * sl.per, n1 = std::min(k.n, n0 + sl.per);
    const int64_t c0 = cb * kChannelBlock, c1 = std::min(k.ch, c0 + kChannelBlock);
    body(s, n0, n1, c0, c1);
  });
}

// ---------------------------------------------------------------- channels-last pieces
// Rows [r0, r1) of x [., ch]: per-channel statistics of the piece merged into (n, mean[], m2[]).
template <class S>
HWY_NOINLINE void RowsWelford(const Call& k, int64_t r0, int64_t r1, float* scratch, double* n, double* mean,
                              double* m2) {
  const DF d;
  const size_t N = hn::Lanes(d), ch = size_t(k.ch);
  const S* x = static_cast<const S*>(k.x);
  float* sum = scratch;
  float* a1 = scratch + ch;
  float* a2 = scratch + 2 * ch;
  std::memset(scratch, 0, 3 * ch * sizeof(float));
  for (int64_t r = r0; r < r1; ++r) {
    const S* row = x + r * k.ch;
    size_t c = 0;
    for (; c + N <= ch; c += N) hn::StoreU(hn::Add(hn::LoadU(d, sum + c), LoadWiden(d, row + c)), d, sum + c);
    OPF_SCALAR_LOOP
    for (; c < ch; ++c) sum[c] += to_f32(row[c]);
  }
  const float rows = float(r1 - r0);
  for (size_t c = 0; c < ch; ++c) sum[c] = sum[c] / rows;  // now mf
  for (int64_t r = r0; r < r1; ++r) {
    const S* row = x + r * k.ch;
    size_t c = 0;
    for (; c + N <= ch; c += N) {
      const VF dv = hn::Sub(LoadWiden(d, row + c), hn::LoadU(d, sum + c));
      hn::StoreU(hn::Add(hn::LoadU(d, a1 + c), dv), d, a1 + c);
      hn::StoreU(hn::Add(hn::LoadU(d, a2 + c), hn::Mul(dv, dv)), d, a2 + c);
    }
    OPF_SCALAR_LOOP
    for (; c < ch; ++c) {
      const float dv = to_f32(row[c]) - sum[c];
      a1[c] += dv;
      a2[c] += dv * dv;
    }
  }
  const double nb = double(r1 - r0);
  size_t c = 0;
#if HWY_COMPILER_CLANG
  // The per-channel f64 merge by lanes, for clang, which leaves chan_merge's loop scalar (up to 1.5x
  // this entry's time against GCC's JIT; GCC vectorizes the loop itself, faster than this: +12 %
  // when its prebuilt module ran this code). chan_merge's arithmetic in its order (the same bits),
  // its n == 0 case a select; nb > 0 (a piece has rows), so chan_merge's nb == 0 case cannot occur.
  const DD dd;
  const hn::Rebind<float, DD> dh;
  const VD vnb = hn::Set(dd, nb), zero = hn::Zero(dd);
  for (; c + hn::Lanes(dd) <= ch; c += hn::Lanes(dd)) {
    const VD s = hn::PromoteTo(dd, hn::LoadU(dh, a1 + c));
    VD m2b = hn::Sub(hn::PromoteTo(dd, hn::LoadU(dh, a2 + c)), hn::Div(hn::Mul(s, s), vnb));
    m2b = hn::IfThenElse(hn::Lt(m2b, zero), zero, m2b);
    const VD mb = hn::Add(hn::PromoteTo(dd, hn::LoadU(dh, sum + c)), hn::Div(s, vnb));
    const VD cnt = hn::LoadU(dd, n + c), mu = hn::LoadU(dd, mean + c), q = hn::LoadU(dd, m2 + c);
    const VD t = hn::Add(cnt, vnb), dl = hn::Sub(mb, mu);
    const VD mu_merged = hn::Add(mu, hn::Mul(dl, hn::Div(vnb, t)));
    const VD q_merged = hn::Add(q, hn::Add(m2b, hn::Mul(hn::Mul(dl, dl), hn::Div(hn::Mul(cnt, vnb), t))));
    const auto first = hn::Eq(cnt, zero);
    hn::StoreU(hn::IfThenElse(first, vnb, t), dd, n + c);
    hn::StoreU(hn::IfThenElse(first, mb, mu_merged), dd, mean + c);
    hn::StoreU(hn::IfThenElse(first, m2b, q_merged), dd, m2 + c);
  }
  OPF_SCALAR_LOOP
#endif
  for (; c < ch; ++c) {
    const double s = double(a1[c]);
    double m2b = double(a2[c]) - s * s / nb;
    if (m2b < 0) m2b = 0;
    double cnt = n[c];
    chan_merge(cnt, mean[c], m2[c], nb, double(sum[c]) + s / nb, m2b);
    n[c] = cnt;
  }
}

template <class S>
HWY_NOINLINE void RowsReduce(const Call& k, int64_t r0, int64_t r1, float* scratch, double* s, double* sx) {
  const DF d;
  const size_t N = hn::Lanes(d), ch = size_t(k.ch);
  const S* x = static_cast<const S*>(k.x);
  const S* g = static_cast<const S*>(k.dy);
  float* t0 = scratch;
  float* t1 = scratch + ch;
  std::memset(scratch, 0, 2 * ch * sizeof(float));
  for (int64_t r = r0; r < r1; ++r) {
    const S* xr = x + r * k.ch;
    const S* gr = g + r * k.ch;
    size_t c = 0;
    for (; c + N <= ch; c += N) {
      const VF gv = LoadWiden(d, gr + c);
      const VF xm = hn::Sub(LoadWiden(d, xr + c), hn::LoadU(d, k.mean + c));
      hn::StoreU(hn::Add(hn::LoadU(d, t0 + c), gv), d, t0 + c);
      hn::StoreU(hn::Add(hn::LoadU(d, t1 + c), hn::Mul(gv, xm)), d, t1 + c);
    }
    OPF_SCALAR_LOOP
    for (; c < ch; ++c) {
      const float gv = to_f32(gr[c]);
      t0[c] += gv;
      t1[c] += gv * (to_f32(xr[c]) - k.mean[c]);
    }
  }
  for (size_t c = 0; c < ch; ++c) {
    s[c] += double(t0[c]);
    sx[c] += double(t1[c]);
  }
}

// Channels last: slot s covers pieces [s * per, ...) of piece_rows rows each; one task per slot.
struct LastSlotScratch;  // a task's per-channel buffers (cpu/scratch.h)

template <class Body>
void ForLastSlots(const Call& k, Body&& body) {
  const int64_t pr = piece_rows(k.ch), pieces = (k.n + pr - 1) / pr;
  const Slots sl = slots_of(pieces);
  opf::cpu::parallel_for(k.host, sl.count, [&](int64_t s) {
    float* const scratch = opf::cpu::thread_scratch<LastSlotScratch>(size_t(3 * k.ch));
    const int64_t p1 = std::min(pieces, (s + 1) * sl.per);
    for (int64_t p = s * sl.per; p < p1; ++p) body(s, p * pr, std::min(k.n, (p + 1) * pr), scratch);
  });
}

inline Slots LastSlots(const Call& k) {
  const int64_t pr = piece_rows(k.ch);
  return slots_of((k.n + pr - 1) / pr);
}

// ---------------------------------------------------------------- entries
// The layout an entry's kernels are compiled for. Each entry but backward_elemt names one, so its
// JIT module (one entry: OPF_JIT_ENTRY) compiles that layout's loops alone: syncbn's slowest pair,
// forward_z_c_last, compiled 22 % faster. Other modules keep one instantiation for both layouts,
// chosen per call: split there, the prebuilt module's backward_elemt ran 13 % more instructions
// at 1x1x1 (more instantiations in the unit, less inlining).
enum Layout { kNchw, kChannelsLast, kEitherLayout };
#ifdef OPF_JIT_ENTRY
constexpr int kNchwEntry = kNchw, kLastEntry = kChannelsLast;
#else
constexpr int kNchwEntry = kEitherLayout, kLastEntry = kEitherLayout;
#endif
// Whether a kernel compiled for kLayout runs this call channels last.
template <int kLayout>
bool ChannelsLast(const Call& k) {
  return kLayout == kChannelsLast || (kLayout == kEitherLayout && k.last);
}

template <class S, int kLayout>
void WelfordT(const Call& k) {
  const bool last = ChannelsLast<kLayout>(k);
  const Slots sl = last ? LastSlots(k) : slots_of(k.n);
  Acc acc(sl.count, k.ch);  // count, mean, m2
  const int64_t C = k.ch;
  if (last) {
    if constexpr (kLayout != kNchw)
      ForLastSlots(k, [&](int64_t s, int64_t r0, int64_t r1, float* scratch) {
        RowsWelford<S>(k, r0, r1, scratch, &acc.a[s * C], &acc.b[s * C], &acc.c[s * C]);
      });
  } else if constexpr (kLayout != kChannelsLast) {
    const S* x = static_cast<const S*>(k.x);
    ForNchwTasks(k, sl, [&](int64_t s, int64_t n0, int64_t n1, int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        double n = 0, mean = 0, m2 = 0;
        for (int64_t i = n0; i < n1; ++i) {
          const S* row = x + (i * C + c) * k.hw;
          for (int64_t j = 0; j < k.hw; j += OPF_TUNE_PIECE)
            PieceWelford(row + j, size_t(std::min<int64_t>(OPF_TUNE_PIECE, k.hw - j)), n, mean, m2);
        }
        acc.a[s * C + c] = n, acc.b[s * C + c] = mean, acc.c[s * C + c] = m2;
      }
    });
  }
  for (int64_t c = 0; c < C; ++c) {
    double n = 0, mean = 0, m2 = 0;
    for (int64_t s = 0; s < sl.count; ++s)
      chan_merge(n, mean, m2, acc.a[s * C + c], acc.b[s * C + c], acc.c[s * C + c]);
    k.o[0][c] = float(mean);
    k.o[1][c] = n > 0 ? float(m2 / n) : 0.0f;
  }
}

template <class S, int kLayout>
void ReduceT(const Call& k) {
  const bool last = ChannelsLast<kLayout>(k);
  const Slots sl = last ? LastSlots(k) : slots_of(k.n);
  Acc acc(sl.count, k.ch);  // sum dy, sum dy (x - mean)
  const int64_t C = k.ch;
  if (last) {
    if constexpr (kLayout != kNchw)
      ForLastSlots(k, [&](int64_t s, int64_t r0, int64_t r1, float* scratch) {
        RowsReduce<S>(k, r0, r1, scratch, &acc.a[s * C], &acc.b[s * C]);
      });
  } else if constexpr (kLayout != kChannelsLast) {
    const S* x = static_cast<const S*>(k.x);
    const S* g = static_cast<const S*>(k.dy);
    ForNchwTasks(k, sl, [&](int64_t s, int64_t n0, int64_t n1, int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        double sum = 0, sx = 0;
        for (int64_t i = n0; i < n1; ++i) {
          const int64_t off = (i * C + c) * k.hw;
          for (int64_t j = 0; j < k.hw; j += OPF_TUNE_PIECE)
            PieceReduce(g + off + j, x + off + j, size_t(std::min<int64_t>(OPF_TUNE_PIECE, k.hw - j)), k.mean[c], sum,
                        sx);
        }
        acc.a[s * C + c] = sum, acc.b[s * C + c] = sx;
      }
    });
  }
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0, sx = 0;
    for (int64_t s = 0; s < sl.count; ++s) sum += acc.a[s * C + c], sx += acc.b[s * C + c];
    k.o[0][c] = float(sum);
    k.o[1][c] = float(sx);
    k.o[2][c] = float(sx * double(k.invstd[c]));
    k.o[3][c] = float(sum);
  }
}

// Elementwise entries, per-channel f32 constants m, a = invstd weight, b (bias), k1, k2:
//   forward        t = (x - m) a + b [+ z]; y = t, or 0 where t <= 0 with relu (NaN stays)
//   backward_elemt dx = (dy - k1 - (x - m) k2) a
//   relu_backward  dy_masked = t <= 0 ? 0 : dy, t as the forward's (channels last only)
struct ConstsScratch;  // the calling thread's buffer of the tables (cpu/scratch.h)
struct Consts {
  // 5 tables of `pad` floats in the calling thread's scratch: not a heap block per call, whose
  // place relative to the output's pages (and so its speed) changed from process to process
  explicit Consts(size_t pad) : m(opf::cpu::thread_scratch<ConstsScratch>(5 * pad)) {
    a = m + pad, b = a + pad, k1 = b + pad, k2 = k1 + pad;
    std::fill(m, m + 5 * pad, 0.0f);
  }
  float *m, *a, *b, *k1, *k2;
};
enum Mode { kForward, kElemt, kReluBackward };

template <class S, int kMode, bool kZ, bool kRelu, int kLayout>
HWY_NOINLINE void ElemRows(const Call& k, const Consts& q, bool stream, int64_t r0, int64_t r1) {
  const DF d;
  const S* x = static_cast<const S*>(k.x);
  const S* g = static_cast<const S*>(k.dy);
  const S* z = static_cast<const S*>(k.z);
  S* out = static_cast<S*>(k.out);
  const bool nchw = !ChannelsLast<kLayout>(k);
  if constexpr (kLayout != kChannelsLast) {
    if (nchw) {  // row r = (n, c) of hw elements: scalar constants
      for (int64_t r = r0; r < r1; ++r) {
        const size_t c = size_t(r % k.ch), off = size_t(r * k.hw);
        const float m = q.m[c], a = q.a[c], b = q.b[c];
        const VF vm = hn::Set(d, m), va = hn::Set(d, a), vb = hn::Set(d, b);
        if constexpr (kMode == kElemt) {
          const float k1 = q.k1[c], k2 = q.k2[c];
          const VF v1 = hn::Set(d, k1), v2 = hn::Set(d, k2);
          WriteRow(
              d, out + off, size_t(k.hw), stream,
              [&](size_t j) {
                const VF u = hn::Sub(hn::Sub(LoadWiden(d, g + off + j), v1),
                                     hn::Mul(hn::Sub(LoadWiden(d, x + off + j), vm), v2));
                return hn::Mul(u, va);
              },
              [&](size_t j) { return (to_f32(g[off + j]) - k1 - (to_f32(x[off + j]) - m) * k2) * a; });
        } else {
          WriteRow(
              d, out + off, size_t(k.hw), stream,
              [&](size_t j) { return hn::Add(hn::Mul(hn::Sub(LoadWiden(d, x + off + j), vm), va), vb); },
              [&](size_t j) { return (to_f32(x[off + j]) - m) * a + b; });
        }
      }
    }
  }
  if constexpr (kLayout != kNchw) {
    if (!nchw) {  // row r of ch channels: constants by lane; the row's tail through the scalar formula
      const size_t ch = size_t(k.ch);
      const VF zero = hn::Zero(d);
      for (int64_t r = r0; r < r1; ++r) {
        const size_t off = size_t(r) * ch;
        if constexpr (kMode == kElemt) {
          WriteRow(
              d, out + off, ch, stream,
              [&](size_t j) {
                const VF u =
                    hn::Sub(hn::Sub(LoadWiden(d, g + off + j), hn::LoadU(d, q.k1 + j)),
                            hn::Mul(hn::Sub(LoadWiden(d, x + off + j), hn::LoadU(d, q.m + j)), hn::LoadU(d, q.k2 + j)));
                return hn::Mul(u, hn::LoadU(d, q.a + j));
              },
              [&](size_t j) {
                return (to_f32(g[off + j]) - q.k1[j] - (to_f32(x[off + j]) - q.m[j]) * q.k2[j]) * q.a[j];
              });
        } else {
          // the pre-ReLU value; the two forms must round alike (the mask of relu_backward)
          const auto tv = [&](size_t j) {
            VF t = hn::Add(hn::Mul(hn::Sub(LoadWiden(d, x + off + j), hn::LoadU(d, q.m + j)), hn::LoadU(d, q.a + j)),
                           hn::LoadU(d, q.b + j));
            if constexpr (kZ) t = hn::Add(t, LoadWiden(d, z + off + j));
            return t;
          };
          const auto t1 = [&](size_t j) {
            float t = (to_f32(x[off + j]) - q.m[j]) * q.a[j] + q.b[j];
            if constexpr (kZ) t = t + to_f32(z[off + j]);
            return t;
          };
          if constexpr (kMode == kForward) {
            WriteRow(
                d, out + off, ch, stream,
                [&](size_t j) {
                  const VF t = tv(j);
                  if constexpr (kRelu) return hn::IfThenZeroElse(hn::Le(t, zero), t);
                  return t;
                },
                [&](size_t j) {
                  const float t = t1(j);
                  if constexpr (kRelu) return t <= 0.0f ? 0.0f : t;
                  return t;
                });
          } else {
            WriteRow(
                d, out + off, ch, stream,
                [&](size_t j) { return hn::IfThenZeroElse(hn::Le(tv(j), zero), LoadWiden(d, g + off + j)); },
                [&](size_t j) { return t1(j) <= 0.0f ? 0.0f : to_f32(g[off + j]); });
          }
        }
      }
    }
  }
  if (stream) hwy::FlushStream();
}

template <class S, int kMode, bool kZ, bool kRelu, int kLayout>
void ElemT(const Call& k) {
  const size_t C = size_t(k.ch);
  // padded by a vector so that the channels-last loads of a row's last whole vector stay inside
  Consts q(C + hn::Lanes(DF()));
  for (size_t c = 0; c < C; ++c) {
    q.m[c] = k.mean[c];
    q.a[c] = k.invstd[c] * k.weight[c];
    if constexpr (kMode == kElemt) {
      const double is = k.invstd[c];
      q.k1[c] = float(double(k.sum_dy[c]) / k.count);
      q.k2[c] = float(is * is * double(k.sum_dy_xmu[c]) / k.count);
    } else {
      q.b[c] = k.bias[c];
    }
  }
  const int64_t rows = k.last ? k.n : k.n * k.ch, len = k.last ? k.ch : k.hw;
  const double bytes = double(rows) * double(len) * sizeof(S);
  const bool stream = bytes >= double(OPF_TUNE_STREAM_MIN_BYTES);
  const double streams = 2.0 + (kMode == kForward ? 0 : 1) + (kZ ? 1 : 0);  // tensors read and written per element
  const int64_t chunk = opf::cpu::rows_per_task(rows, streams * double(len) * sizeof(S));
  opf::cpu::parallel_rows(k.host, rows, chunk, [&](int64_t r0, int64_t r1) {
    ElemRows<S, kMode, kZ, kRelu, kLayout>(k, q, stream, r0, r1);
  });
}

void RunWelford(const Call& k) {
  if (k.last) opf::cpu::run_storage<"welford_c_last">(k.dtype, [&](auto s) { WelfordT<decltype(s), kLastEntry>(k); });
  else opf::cpu::run_storage<"welford">(k.dtype, [&](auto s) { WelfordT<decltype(s), kNchwEntry>(k); });
}
void RunReduce(const Call& k) {
  if (k.last)
    opf::cpu::run_storage<"backward_reduce_c_last">(k.dtype, [&](auto s) { ReduceT<decltype(s), kLastEntry>(k); });
  else opf::cpu::run_storage<"backward_reduce">(k.dtype, [&](auto s) { ReduceT<decltype(s), kNchwEntry>(k); });
}
void RunForward(const Call& k) {
  if (!k.last)
    return opf::cpu::run_storage<"forward">(k.dtype,
                                            [&](auto s) { ElemT<decltype(s), kForward, false, false, kNchwEntry>(k); });
  if (k.z) {
    opf::cpu::run_storage<"forward_z_c_last">(k.dtype, [&](auto s) {
      if (k.relu) ElemT<decltype(s), kForward, true, true, kLastEntry>(k);
      else ElemT<decltype(s), kForward, true, false, kLastEntry>(k);
    });
  } else {
    opf::cpu::run_storage<"forward_c_last">(k.dtype, [&](auto s) {
      if (k.relu) ElemT<decltype(s), kForward, false, true, kLastEntry>(k);
      else ElemT<decltype(s), kForward, false, false, kLastEntry>(k);
    });
  }
}
void RunElemt(const Call& k) {
  if (k.last)
    opf::cpu::run_storage<"backward_elemt_c_last">(
        k.dtype, [&](auto s) { ElemT<decltype(s), kElemt, false, false, kEitherLayout>(k); });
  else
    opf::cpu::run_storage<"backward_elemt">(
        k.dtype, [&](auto s) { ElemT<decltype(s), kElemt, false, false, kEitherLayout>(k); });
}
void RunReluBackward(const Call& k) {
  if (k.z)
    opf::cpu::run_storage<"relu_backward_z_c_last">(
        k.dtype, [&](auto s) { ElemT<decltype(s), kReluBackward, true, false, kLastEntry>(k); });
  else
    opf::cpu::run_storage<"relu_backward_c_last">(
        k.dtype, [&](auto s) { ElemT<decltype(s), kReluBackward, false, false, kLastEntry>(k); });
}
const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace opf::syncbn_cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::syncbn_cpu {
OPF_KERNEL_EXPORT(RunWelford);
OPF_KERNEL_EXPORT(RunReduce);
OPF_KERNEL_EXPORT(RunForward);
OPF_KERNEL_EXPORT(RunElemt);
OPF_KERNEL_EXPORT(RunReluBackward);
OPF_CPU_EXPORT_TARGET()
}  // namespace opf::syncbn_cpu
#endif  // HWY_ONCE

#if HWY_ONCE && OPF_HOST_PART  // the host code: not in a JIT kernels module (cpu/dispatch.h)
OPF_HOST_CODE_BEGIN
namespace opf::syncbn_cpu {
using namespace opf::cpu;

constexpr int kParams = 3;  // eps, momentum, fuse_relu

// x (argument i): [N, C, HW], or [M, C] channels last; fills k's shape and dtype.
const opf_tensor& expect_x(const Args& args, int i, const char* name, bool last, Call& k) {
  const opf_tensor& x = expect_lead(args, i, name, last ? 2 : 3, last ? "[M, C]" : "[N, C, HW]");
  k.dtype = x.dtype;
  k.last = last;
  k.n = x.shape[0];
  k.ch = x.shape[1];
  k.hw = last ? 1 : x.shape[2];
  if (x.data == nullptr && k.n * k.ch * k.hw > 0) failf("%s: argument %d (%s) has no data", args.entry(), i, name);
  return x;
}

const void* same_as_x(const Args& args, int i, const char* name, const Call& k) {
  if (k.last) return expect_arg(args, i, name, k.dtype, {k.n, k.ch}).data;
  return expect_arg(args, i, name, k.dtype, {k.n, k.ch, k.hw}).data;
}

float* channels(const Args& args, int i, const char* name, const Call& k) {
  return static_cast<float*>(expect_arg(args, i, name, OPF_F32, {k.ch}).data);
}

// count_all (argument i, [K] f32): each a finite integer >= 0; returns their sum, which must be
// above `min_total`.
double counts(const Args& args, int i, int64_t& k, double min_total, const char* need) {
  const opf_tensor& t = args.tensor(i, "count_all");
  if (t.dtype != OPF_F32 || t.ndim != 1)
    failf("%s: argument %d (count_all) must be a 1-D f32 tensor [K], got %d-D %s", args.entry(), i, t.ndim,
          dtype_str(t.dtype));
  k = t.shape[0];
  if (k > 0 && t.data == nullptr) failf("%s: argument %d (count_all) has no data", args.entry(), i);
  const float* v = static_cast<const float*>(t.data);
  double total = 0;
  for (int64_t j = 0; j < k; ++j) {
    if (!(v[j] >= 0) || std::isinf(v[j]) || v[j] != std::floor(v[j]))
      failf("%s: argument %d (count_all) element %lld is %g; counts are integers >= 0", args.entry(), i, (long long)j,
            double(v[j]));
    total += double(v[j]);
  }
  if (!(total > min_total)) failf("%s: argument %d (count_all) sums to %g; %s", args.entry(), i, total, need);
  return total;
}

// welford_parallel does its work below, per channel: optimized in JIT modules too.
OPF_HOST_CODE_END

// welford_parallel: Chan's merge of K shards per channel, in shard order; f64 throughout.
void merge(const opf_call* c, bool execute) {
  const Args args(c, 7, kParams);
  const opf_tensor& ma = args.tensor(0, "mean_all");
  if (ma.ndim != 2 || ma.dtype != OPF_F32)
    failf("welford_parallel: argument 0 (mean_all) must be a 2-D f32 tensor [K, C], got %d-D %s", ma.ndim,
          dtype_str(ma.dtype));
  const int64_t K = ma.shape[0], C = ma.shape[1];
  if (ma.data == nullptr && K * C > 0) failf("welford_parallel: argument 0 (mean_all) has no data");
  const float* mean_all = static_cast<const float*>(ma.data);
  const float* var_all = static_cast<const float*>(expect_arg(args, 1, "var_all", OPF_F32, {K, C}).data);
  int64_t kc = 0;
  const double n = counts(args, 2, kc, 1.0, "the unbiased running variance needs more than 1 value in all");
  if (kc != K)
    failf("welford_parallel: argument 2 (count_all) has size %lld in dim 0, expected %lld (mean_all's K)",
          (long long)kc, (long long)K);
  const float* count = static_cast<const float*>(args.tensor(2, "count_all").data);
  Call k{};
  k.ch = C;
  float* rm = channels(args, 3, "running_mean", k);
  float* rv = channels(args, 4, "running_var", k);
  float* mean = channels(args, 5, "mean", k);
  float* invstd = channels(args, 6, "invstd", k);
  const double eps = args.f64(0, "eps"), mom = args.f64(1, "momentum");
  if (!execute) return;
  for (int64_t ch = 0; ch < C; ++ch) {
    double t = 0, mu = 0, m2 = 0;
    for (int64_t j = 0; j < K; ++j) {
      const double nj = count[j];
      chan_merge(t, mu, m2, nj, mean_all[j * C + ch], double(var_all[j * C + ch]) * nj);
    }
    // A NaN shard mean (its data held a NaN) makes the variance NaN too, also when it is the only
    // shard, whose M2 Chan's merge copies without looking at the mean.
    if (std::isnan(mu)) m2 = mu;
    mean[ch] = float(mu);
    invstd[ch] = float(1.0 / std::sqrt(m2 / n + eps));
    rm[ch] = float((1 - mom) * double(rm[ch]) + mom * mu);
    rv[ch] = float((1 - mom) * double(rv[ch]) + mom * (m2 / (n - 1)));
  }
}

OPF_HOST_CODE_BEGIN
void call(const opf_call* c, bool execute) {
  std::string_view entry = c->entry ? c->entry : "";
  if (entry == "welford_parallel") return merge(c, execute);
  const bool last = entry.ends_with("_c_last");
  const std::string_view base = last ? entry.substr(0, entry.size() - 7) : entry;
  Call k{};
  k.host = c->host;
  if (base == "welford") {
    const Args args(c, 3, kParams);
    expect_x(args, 0, "x", last, k);
    k.x = args.tensor(0, "x").data;
    k.o[0] = channels(args, 1, "mean", k);
    k.o[1] = channels(args, 2, "var_biased", k);
    if (!execute || k.ch == 0) return;
    if (k.n * k.hw == 0) {  // no values: the empty statistics
      std::fill(k.o[0], k.o[0] + k.ch, 0.0f);
      std::fill(k.o[1], k.o[1] + k.ch, 0.0f);
      return;
    }
    OPF_DISPATCH(RunWelford)(k);
  } else if (base == "forward" ||
             (last && (base == "forward_z" || base == "relu_backward" || base == "relu_backward_z"))) {
    // (dy,) x, (z,), mean, invstd, weight, bias, out
    const bool bw = base.starts_with("relu_backward"), has_z = base.ends_with("_z");
    const Args args(c, 6 + (bw ? 1 : 0) + (has_z ? 1 : 0), kParams);
    int i = 0;
    if (bw) k.dy = expect_x(args, i++, "dy", last, k).data;
    k.x = bw ? same_as_x(args, i++, "x", k) : expect_x(args, i++, "x", last, k).data;
    if (has_z) k.z = same_as_x(args, i++, "z", k);
    k.mean = channels(args, i++, "mean", k);
    k.invstd = channels(args, i++, "invstd", k);
    k.weight = channels(args, i++, "weight", k);
    k.bias = channels(args, i++, "bias", k);
    k.out = const_cast<void*>(same_as_x(args, i, bw ? "dy_masked" : "y", k));
    k.relu = last && !bw && args.flag(2, "fuse_relu");
    if (!execute || k.n * k.ch * k.hw == 0) return;
    if (bw) OPF_DISPATCH(RunReluBackward)(k);
    else OPF_DISPATCH(RunForward)(k);
  } else if (base == "backward_reduce") {
    const Args args(c, 8, kParams);
    k.dy = expect_x(args, 0, "dy", last, k).data;
    k.x = same_as_x(args, 1, "x", k);
    k.mean = channels(args, 2, "mean", k);
    k.invstd = channels(args, 3, "invstd", k);
    const char* names[4] = {"sum_dy", "sum_dy_xmu", "grad_weight", "grad_bias"};
    for (int j = 0; j < 4; ++j) k.o[j] = channels(args, 4 + j, names[j], k);
    if (!execute || k.ch == 0) return;
    if (k.n * k.hw == 0) {  // empty sums
      for (float* o : k.o) std::fill(o, o + k.ch, 0.0f);
      return;
    }
    OPF_DISPATCH(RunReduce)(k);
  } else if (base == "backward_elemt") {
    const Args args(c, 9, kParams);
    k.dy = expect_x(args, 0, "dy", last, k).data;
    k.x = same_as_x(args, 1, "x", k);
    k.mean = channels(args, 2, "mean", k);
    k.invstd = channels(args, 3, "invstd", k);
    k.weight = channels(args, 4, "weight", k);
    k.sum_dy = channels(args, 5, "sum_dy", k);
    k.sum_dy_xmu = channels(args, 6, "sum_dy_xmu", k);
    int64_t kc = 0;
    k.count = counts(args, 7, kc, 0.0, "the gradient's mean needs at least 1 value in all");
    k.out = const_cast<void*>(same_as_x(args, 8, "dx", k));
    if (execute && k.n * k.ch * k.hw > 0) OPF_DISPATCH(RunElemt)(k);
  } else {
    failf(
        "unknown entry '%.40s' (syncbn has welford, welford_parallel, forward, backward_reduce, backward_elemt, "
        "their _c_last forms, forward_z_c_last, relu_backward_c_last and relu_backward_z_c_last)",
        c->entry ? c->entry : "");
  }
}

}  // namespace opf::syncbn_cpu

OPF_DEFINE_MODULE("syncbn", "cpu", opf::syncbn_cpu::isa(), opf::syncbn_cpu::call)
OPF_HOST_CODE_END
#endif  // HWY_ONCE
