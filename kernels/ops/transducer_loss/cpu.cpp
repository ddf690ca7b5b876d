// transducer_loss — CPU module (contract, incl. padding, packing, NaN and bad input: ref.cpp).
// Highway SIMD for the gradient (prebuilt modules dispatch on the running CPU; the JIT builds only
// the host target); the caller's thread pool (cpu/parallel.h) for both entries.
//   forward: one task per (batch, lattice): alpha and beta of a batch are independent recurrences,
//            2B tasks. A task first gathers its lattice's two log-probs per cell (blank and
//            label: two cache lines of each x row, the only part of x the loss needs) into a
//            skewed scratch, then runs the recurrence by anti-diagonals, each one vector sweep
//            (Lattice). Each cell is computed by one task in a fixed order, so any thread count
//            gives the same bits.
//   backward: alpha and beta are the forward's (apex saves them), so the gradient is one pass
//            over x_grad (and x when fused): tasks of whole (batch, t) lattice rows; per cell the
//            two edge occupancies are scalars, the row is built in an L1 scratch (exp of the
//            whole row when fused, zeros otherwise; the two edges patched in) and written once,
//            streamed (non-temporal) when x_grad exceeds the cache.
// Arithmetic as written: no implicit a*b+c -> fma contraction, so that every target and the JIT
// build round the same expressions. First line of the TU on purpose (see softmax_xentropy).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif
#ifndef OPF_TUNE_STREAM_MIN_BYTES
#define OPF_TUNE_STREAM_MIN_BYTES (16 << 20)  // outputs this large bypass the cache (~ usable L3)
#endif
#ifndef OPF_TRANSDUCER_LOSS_CPU_COMMON
#define OPF_TRANSDUCER_LOSS_CPU_COMMON
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

#include "cpu/args.h"
#include "cpu/dispatch.h"
#include "cpu/parallel.h"
#include "cpu/storage.h"
#include "opforge/module.h"

namespace opf::transducer_loss_cpu {
// The lattice geometry shared by both entries (validated by call()).
struct Geometry {
  const opf_host* host;
  int32_t dtype;
  int64_t B, T, U1, V, blank;
  bool packed;
  const void* x;
  const int64_t* label;  // [B, U1 - 1]
  const int64_t* f_len;
  const int64_t* y_len;
  const int64_t* start;  // [B]: batch b's first x row
  // x row of cell (t, u) of batch b
  int64_t row(int64_t b, int64_t t, int64_t u) const { return start[b] + t * (packed ? y_len[b] + 1 : U1) + u; }
};
struct Forward {
  Geometry g;
  float* alpha;
  float* beta;
  float* loss;
  int32_t dtype = 0;  // g.dtype, where cpu/dispatch.h looks
};
struct Backward {
  Geometry g;
  const float* grad;
  const float* alpha;
  const float* beta;
  void* dx;
  bool fused;
  int32_t dtype = 0;
};

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// log(exp(a) + exp(b)), NaN-propagating, -inf as the empty sum.
inline float LogAddExp(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return a + b;
  if (a == kNegInf) return b;
  if (b == kNegInf) return a;
  return std::max(a, b) + std::log1p(std::exp(-std::fabs(a - b)));
}
}  // namespace opf::transducer_loss_cpu
#endif  // OPF_TRANSDUCER_LOSS_CPU_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/transducer_loss/cpu.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/aligned_allocator.h"
#include "cpu/simd-inl.h"
#include "cpu/exp-inl.h"
#include "hwy/contrib/math/math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::transducer_loss_cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;
using opf::cpu::from_f32;
using opf::cpu::to_f32;

// LogAddExp (the scalar one's semantics: NaN in, NaN out; -inf is the empty sum) on vectors.
template <class D>
HWY_INLINE hn::Vec<D> LogAddExpV(D d, hn::Vec<D> a, hn::Vec<D> b) {
  const auto ninf = hn::Set(d, kNegInf);
  // exp(-|a - b|) below exp(-100) adds nothing to log1p's f32 result; the clamp keeps hn::Exp in range
  const auto ad = hn::Max(hn::Neg(hn::Abs(hn::Sub(a, b))), hn::Set(d, -100.0f));
  auto r = hn::Add(hn::Max(a, b), hn::Log1p(d, hn::Exp(d, ad)));
  r = hn::IfThenElse(hn::Eq(a, ninf), b, r);
  r = hn::IfThenElse(hn::Eq(b, ninf), a, r);
  return hn::IfThenElse(hn::Or(hn::IsNaN(a), hn::IsNaN(b)), hn::Add(a, b), r);
}

// alpha (forward) or beta (!forward) of batch b into out [T, U1] (cells outside the lattice -inf),
// by anti-diagonals k = t + u: every cell of a diagonal depends only on the previous one, so a
// diagonal is one vector sweep over u. The log-probs are gathered skewed (row k holds the cells
// of diagonal k by u), so both neighbours of a diagonal are contiguous loads. D holds diagonal
// values by u at D[u + 1] (D[0]: u = -1), -inf where a neighbour is no cell; the lanes a vector
// computes past the diagonal's end are reset to -inf, so the buffers always read that way.
template <class S>
void Lattice(const Geometry& g, int64_t b, bool forward, float* HWY_RESTRICT out, float* HWY_RESTRICT loss) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  const int64_t Tf = g.f_len[b], Uy = g.y_len[b], W = Uy + 1, U1 = g.U1, K = Tf + Uy;  // K diagonals
  const S* x = static_cast<const S*>(g.x);
  const int64_t* y = g.label + b * (U1 - 1);
  // lb[k][u] = lp(k - u, u, blank), ly[k][u] = lp(k - u, u, y_u), W apart (+1: ly's row -1 at u = -1)
  std::vector<float> lbs(size_t(K * W + N + 1), 0.0f), lys(size_t(K * W + N + 1), 0.0f);
  float* lb = lbs.data() + 1;
  float* ly = lys.data() + 1;
  for (int64_t t = 0; t < Tf; ++t)
    for (int64_t u = 0; u < W; ++u) {
      const S* r = x + g.row(b, t, u) * g.V;
      // (the last frame's blanks but the final one leave the lattice: never read, and left 0 so
      // that a NaN there stays out of -inf + lp, as the recurrence's definition has it)
      if (t < Tf - 1 || u == Uy) lb[(t + u) * W + u] = to_f32(r[g.blank]);
      if (u < Uy) ly[(t + u) * W + u] = to_f32(r[y[u]]);
    }
  std::vector<float> bufs(size_t(2 * (W + 2 + N)), kNegInf);
  float* prev = bufs.data();
  float* cur = prev + (W + 2 + N);
  std::fill(out, out + g.T * U1, kNegInf);
  const auto emit = [&](int64_t k, int64_t lo, int64_t hi, const float* D) {
    for (int64_t u = lo; u <= hi; ++u) out[(k - u) * U1 + u] = D[u + 1];
  };
  const auto pad = [&](int64_t hi, float* D) { std::fill(D + hi + 2, D + hi + 2 + N, kNegInf); };
  if (forward) {
    prev[1] = 0.0f;  // alpha(0, 0)
    emit(0, 0, 0, prev);
    for (int64_t k = 1; k < K; ++k) {
      const int64_t lo = std::max<int64_t>(0, k - Tf + 1), hi = std::min(k, Uy);
      const float* lbk = lb + (k - 1) * W;
      const float* lyk = ly + (k - 1) * W - 1;
      for (int64_t u = lo; u <= hi; u += N) {
        const auto up = hn::Add(hn::LoadU(d, prev + u + 1), hn::LoadU(d, lbk + u));
        const auto left = hn::Add(hn::LoadU(d, prev + u), hn::LoadU(d, lyk + u));
        hn::StoreU(LogAddExpV(d, up, left), d, cur + u + 1);
      }
      pad(hi, cur);
      emit(k, lo, hi, cur);
      std::swap(prev, cur);
    }
    return;
  }
  prev[Uy + 1] = 0.0f;  // diagonal K: after the final blank, (Tf, Uy)
  for (int64_t k = K - 1; k >= 0; --k) {
    const int64_t lo = std::max<int64_t>(0, k - Tf + 1), hi = std::min(k, Uy);
    const float* lbk = lb + k * W;
    const float* lyk = ly + k * W;
    for (int64_t u = lo; u <= hi; u += N) {
      const auto down = hn::Add(hn::LoadU(d, prev + u + 1), hn::LoadU(d, lbk + u));
      const auto right = hn::Add(hn::LoadU(d, prev + u + 2), hn::LoadU(d, lyk + u));
      hn::StoreU(LogAddExpV(d, down, right), d, cur + u + 1);
    }
    pad(hi, cur);
    emit(k, lo, hi, cur);
    std::swap(prev, cur);
  }
  *loss = -prev[1];
}

template <class S>
void ForwardT(const Forward& a) {
  const Geometry& g = a.g;
  const int64_t plane = g.T * g.U1;
  opf::cpu::parallel_for(g.host, 2 * g.B, [&](int64_t k) {
    const int64_t b = k / 2;
    if (k % 2 == 0) Lattice<S>(g, b, true, a.alpha + b * plane, nullptr);
    else Lattice<S>(g, b, false, a.beta + b * plane, a.loss + b);
  });
}

// exp(t) for the gradient: 0 below exp's normal range (and for -inf), inf above it, NaN kept.
template <class D>
HWY_INLINE hn::Vec<D> ExpGrad(D d, hn::Vec<D> t) {
  auto e = hn::IfThenZeroElse(hn::Lt(t, hn::Set(d, kExpFloor)), ExpClamped(d, t));
  e = hn::IfThenElse(hn::Gt(t, hn::Set(d, kExpCeil)), hn::Set(d, std::numeric_limits<float>::infinity()), e);
  return hn::IfThenElse(hn::IsNaN(t), t, e);
}

// exp(a + b) - exp(a + next) without the cancellation; `plain` (exp(a + b) as computed) where
// the edge has no weight (next = -inf) or the inputs are not finite.
inline float Cancelled(float a, float b, float next, float plain) {
  if (next == kNegInf || !std::isfinite(a) || !std::isfinite(b) || !std::isfinite(next))
    return std::isnan(next) ? next : plain - std::exp(a + next);
  // factored at the larger exponent: expm1 of a non-positive argument cannot overflow
  return b >= next ? -(std::exp(a + b) * std::expm1(next - b)) : std::exp(a + next) * std::expm1(b - next);
}

// Both edges where a label equals blank: exp(a + b) - exp(a + next) - exp(a + next2), factored at
// the larger of b and the larger edge, the smaller edge subtracted inside the factor. Its own
// function so that the one-edge cells (nearly all) pay no third exp.
inline float CancelledPair(float a, float b, float next, float next2, float plain) {
  if (next < next2) std::swap(next, next2);
  if (next2 == kNegInf) return Cancelled(a, b, next, plain);
  if (!std::isfinite(a) || !std::isfinite(b) || !std::isfinite(next) || !std::isfinite(next2))
    return std::isnan(next) || std::isnan(next2) ? std::nanf("") : plain - std::exp(a + next) - std::exp(a + next2);
  return b >= next ? -(std::exp(a + b) * (std::expm1(next - b) + std::exp(next2 - b)))
                   : std::exp(a + next) * (std::expm1(b - next) - std::exp(next2 - next));
}

template <class S>
void BackwardT(const Backward& a) {
  const Geometry& g = a.g;
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d), V = size_t(g.V);
  const int64_t units = g.B * g.T;  // (batch, t): U1 lattice rows each
  const double out_bytes = a.g.packed ? 0.0 : double(units) * double(g.U1) * double(V) * sizeof(S);
  int64_t packed_rows = 0;
  if (g.packed)
    for (int64_t b = 0; b < g.B; ++b) packed_rows += g.f_len[b] * (g.y_len[b] + 1);
  const bool stream =
      (g.packed ? double(packed_rows) * double(V) * sizeof(S) : out_bytes) >= double(OPF_TUNE_STREAM_MIN_BYTES);
  const int64_t chunk = opf::cpu::rows_per_task(units, (a.fused ? 2.0 : 1.0) * double(g.U1) * double(V) * sizeof(S));
  const auto zero = hn::Zero(d);
  opf::cpu::parallel_rows(g.host, units, chunk, [&](int64_t r0, int64_t r1) {
    hwy::AlignedFreeUniquePtr<float[]> scratch = hwy::AllocateAligned<float>((V + N - 1) / N * N);
    float* HWY_RESTRICT e = scratch.get();
    const S* x = static_cast<const S*>(g.x);
    S* dx = static_cast<S*>(a.dx);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / g.T, t = r % g.T, Tf = g.f_len[b], Uy = g.y_len[b];
      if (g.packed && t >= Tf) continue;  // no such rows
      const int64_t nu = g.packed ? Uy + 1 : g.U1;
      const float* al = a.alpha + (b * g.T + t) * g.U1;
      const float* be = a.beta + (b * g.T + t) * g.U1;
      const float* be_next = be + g.U1;  // t + 1 (read only for t < Tf - 1)
      const float total = a.beta[b * g.T * g.U1], gb = a.grad[b];
      const auto vg = hn::Set(d, gb);
      for (int64_t u = 0; u < nu; ++u) {
        S* out = dx + g.row(b, t, u) * g.V;
        if (t >= Tf || u > Uy) {  // padding: exact zeros
          WriteRow(
              d, out, V, stream, [&](size_t) { return zero; }, [](size_t) { return 0.0f; });
          continue;
        }
        const S* xr = x + g.row(b, t, u) * g.V;
        const float at = al[u], lpb = to_f32(xr[g.blank]);
        const int64_t yu = u < Uy ? g.label[b * (g.U1 - 1) + u] : -1;
        if (a.fused) {
          const float occ = at + be[u] - total;
          const auto vocc = hn::Set(d, occ);
          size_t j = 0;
          for (; j + N <= V; j += N) hn::Store(ExpGrad(d, hn::Add(vocc, LoadWiden(d, xr + j))), d, e + j);
          OPF_SCALAR_LOOP
          for (; j < V; ++j) {
            const float s = occ + to_f32(xr[j]);
            e[j] = s < kExpFloor ? 0.0f : std::exp(s);
          }
          // The edge elements cancel (occupancy * p minus the edge, ~0 where one edge carries the
          // cell): exp(A + beta(t,u)) - exp(A + beta_next) through expm1 (Cancelled), exact but
          // for the inputs' own rounding.
          const float lpy = u < Uy ? to_f32(xr[yu]) : 0.0f;
          const bool has_b = t < Tf - 1 || u == Uy;
          // beta after the blank edge (0 after the final blank; -inf: none out of the last frame)
          const float bnext = t < Tf - 1 ? be_next[u] : u == Uy ? 0.0f : kNegInf;
          if (u < Uy && yu == g.blank) {
            e[g.blank] = CancelledPair(at + lpb - total, be[u], bnext, be[u + 1], e[g.blank]);
          } else {
            if (has_b) e[g.blank] = Cancelled(at + lpb - total, be[u], bnext, e[g.blank]);
            if (u < Uy) e[yu] = Cancelled(at + lpy - total, be[u], be[u + 1], e[yu]);
          }
        } else {
          std::fill(e, e + V, 0.0f);
          if (t < Tf - 1) e[g.blank] -= std::exp(at + be_next[u] + lpb - total);
          else if (u == Uy) e[g.blank] -= std::exp(at + lpb - total);
          if (u < Uy) e[yu] -= std::exp(at + be[u + 1] + to_f32(xr[yu]) - total);
        }
        WriteRow(
            d, out, V, stream, [&](size_t k) { return hn::Mul(vg, hn::LoadU(d, e + k)); },
            [&](size_t k) { return gb * e[k]; });
      }
    }
    if (stream) hwy::FlushStream();  // every thread orders its own streaming stores
  });
}

OPF_CPU_TARGET_ENTRIES()

}  // namespace opf::transducer_loss_cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::transducer_loss_cpu {
OPF_CPU_EXPORT_ENTRIES()
}  // namespace opf::transducer_loss_cpu
#endif  // HWY_ONCE

#if HWY_ONCE && OPF_HOST_PART  // the host code: not in a JIT kernels module (cpu/dispatch.h)
OPF_HOST_CODE_BEGIN
namespace opf::transducer_loss_cpu {
using namespace opf::cpu;

// Everything both entries share, checked before anything is written: shapes of x, label,
// lengths and batch_offset against alpha's [B, T, U1], the lengths, every used label, blank_idx,
// and (packed) batch_offset as the running row total. start receives each batch's first x row.
struct Checked {
  Geometry g;
  std::vector<int64_t> start;
};

void check(const Args& args, int ix, int ilabel, int if_len, int iy_len, int ioff, int ialpha, Checked& c) {
  const char* e = args.entry();
  const int64_t blank = args.i64(0, "blank_idx");
  const bool packed = args.flag(1, "packed_input");
  const opf_tensor& x = args.tensor(ix, "x");
  if (!is_float_storage(x.dtype) || x.ndim != (packed ? 2 : 4))
    failf("%s: argument %d (x) must be a %s f32/f16/bf16 tensor", e, ix,
          packed ? "2-D (packed_input) [rows, V]" : "4-D [B, T, U1, V]");
  const opf_tensor& al = args.tensor(ialpha, "alpha");
  if (al.ndim != 3) failf("%s: argument %d (alpha) must be a 3-D tensor [B, T, U1], got %d dims", e, ialpha, al.ndim);
  const int64_t B = packed ? al.shape[0] : x.shape[0], T = packed ? al.shape[1] : x.shape[1];
  const int64_t U1 = packed ? al.shape[2] : x.shape[2], V = x.shape[x.ndim - 1];
  if (T < 1 || U1 < 1 || V < 1)
    failf("%s: T = %lld, U1 = %lld and V = %lld must each be at least 1", e, (long long)T, (long long)U1, (long long)V);
  expect_arg(args, ialpha, "alpha", OPF_F32, {B, T, U1});
  if (blank < 0 || blank >= V) failf("%s: blank_idx = %lld is outside [0, %lld)", e, (long long)blank, (long long)V);
  const auto* label = static_cast<const int64_t*>(expect_arg(args, ilabel, "label", OPF_I64, {B, U1 - 1}).data);
  const auto* f_len = static_cast<const int64_t*>(expect_arg(args, if_len, "f_len", OPF_I64, {B}).data);
  const auto* y_len = static_cast<const int64_t*>(expect_arg(args, iy_len, "y_len", OPF_I64, {B}).data);
  const auto* off = static_cast<const int64_t*>(expect_arg(args, ioff, "batch_offset", OPF_I64, {packed ? B : 0}).data);
  c.start.assign(size_t(B), 0);
  int64_t total = 0;
  for (int64_t b = 0; b < B; ++b) {
    if (f_len[b] < 1 || f_len[b] > T)
      failf("%s: f_len[%lld] = %lld is outside [1, %lld]", e, (long long)b, (long long)f_len[b], (long long)T);
    if (y_len[b] < 0 || y_len[b] > U1 - 1)
      failf("%s: y_len[%lld] = %lld is outside [0, %lld]", e, (long long)b, (long long)y_len[b], (long long)(U1 - 1));
    for (int64_t u = 0; u < y_len[b]; ++u) {
      const int64_t y = label[b * (U1 - 1) + u];
      if (y < 0 || y >= V)
        failf("%s: label[%lld, %lld] = %lld is outside [0, %lld)", e, (long long)b, (long long)u, (long long)y,
              (long long)V);
    }
    c.start[size_t(b)] = packed ? total : b * T * U1;
    total += f_len[b] * (y_len[b] + 1);
  }
  // packed: the running total of the rows, checked for order first (the likelier mistake)
  for (int64_t b = 1; packed && b < B; ++b)
    if (off[b] < off[b - 1])
      failf("%s: batch_offset[%lld] = %lld is below batch_offset[%lld] = %lld (it must be non-decreasing)", e,
            (long long)b, (long long)off[b], (long long)(b - 1), (long long)off[b - 1]);
  for (int64_t b = 0; packed && b < B; ++b) {
    const int64_t want = c.start[size_t(b)] + f_len[b] * (y_len[b] + 1);
    if (off[b] != want)
      failf("%s: batch_offset[%lld] = %lld, expected %lld (the running total of f_len * (y_len + 1))", e, (long long)b,
            (long long)off[b], (long long)want);
  }
  if (packed && x.shape[0] != total)
    failf("%s: argument %d (x) has %lld rows, expected batch_offset[B-1] = %lld", e, ix, (long long)x.shape[0],
          (long long)total);
  c.g = Geometry{args.host(), x.dtype, B, T, U1, V, blank, packed, x.data, label, f_len, y_len, nullptr};
}

void call(const opf_call* c, bool execute) {
  const std::string_view entry = c->entry ? c->entry : "";
  Checked k;
  if (entry == "forward") {
    const Args args(c, 8, 3);
    check(args, 0, 1, 2, 3, 4, 5, k);
    const Geometry& g = k.g;
    const opf_tensor& x = args.tensor(0, "x");
    if (x.data == nullptr && numel(x) > 0) failf("forward: argument 0 (x) has no data");
    Forward a{g, static_cast<float*>(expect_arg(args, 5, "alpha", OPF_F32, {g.B, g.T, g.U1}).data),
              static_cast<float*>(expect_arg(args, 6, "beta", OPF_F32, {g.B, g.T, g.U1}).data),
              static_cast<float*>(expect_arg(args, 7, "loss", OPF_F32, {g.B}).data)};
    a.g.start = k.start.data();
    a.dtype = g.dtype;
    if (!execute || g.B == 0) return;
    OPF_DISPATCH(RunForward)(a);
  } else if (entry == "backward") {
    const Args args(c, 9, 3);
    check(args, 0, 6, 4, 5, 7, 2, k);
    const Geometry& g = k.g;
    const opf_tensor& x = args.tensor(0, "x");
    if (x.data == nullptr && numel(x) > 0) failf("backward: argument 0 (x) has no data");
    const opf_tensor& dx = args.tensor(8, "x_grad");
    if (dx.dtype != x.dtype || dx.ndim != x.ndim || !std::equal(dx.shape, dx.shape + dx.ndim, x.shape))
      failf("backward: argument 8 (x_grad) must have x's dtype and shape");
    if (dx.data == nullptr && numel(dx) > 0) failf("backward: argument 8 (x_grad) has no data");
    Backward a{g,
               static_cast<const float*>(expect_arg(args, 1, "loss_grad", OPF_F32, {g.B}).data),
               static_cast<const float*>(expect_arg(args, 2, "alpha", OPF_F32, {g.B, g.T, g.U1}).data),
               static_cast<const float*>(expect_arg(args, 3, "beta", OPF_F32, {g.B, g.T, g.U1}).data),
               dx.data,
               args.flag(2, "fuse_softmax_backward")};
    a.g.start = k.start.data();
    a.dtype = g.dtype;
    if (!execute || g.B == 0) return;
    OPF_DISPATCH(RunBackward)(a);
  } else {
    failf("unknown entry '%.40s' (transducer_loss has forward, backward)", c->entry ? c->entry : "");
  }
}

}  // namespace opf::transducer_loss_cpu

OPF_DEFINE_MODULE("transducer_loss", "cpu", opf::transducer_loss_cpu::isa(), opf::transducer_loss_cpu::call)
OPF_HOST_CODE_END
#endif  // HWY_ONCE
