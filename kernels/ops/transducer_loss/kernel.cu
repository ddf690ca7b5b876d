// transducer_loss — GPU kernels, one text for CUDA and HIP (see gpu/gpu_compat.cuh), launched through
// the plans below by the generic host launcher (gpu/launch_abi.h).
//
// Contract: ref.cpp (lattice recurrences, -inf outside the lattice, exact-zero padding, NaN rules);
// the rounding points follow cpu.cpp. Storage T = f32 | f16 | bf16, alpha/beta/loss and math f32.
//   forward    fixed grid of LOSS_GRID blocks (extent ONE, grid_y), grid-stride over the 2B tasks
//              (batch b, lattice alpha or beta): a block first writes -inf to its plane's cells
//              outside the lattice, then sweeps the anti-diagonals k = t + u in order (alpha up,
//              beta down), threads over u, one barrier per diagonal; a diagonal reads the previous
//              one from the block's own output plane (global memory, visible after the barrier).
//              One cell, one thread, one fixed expression: bitwise reproducible.
//   backward   grid over x's rows (GRAD_ROWS rows per block, GRAD_BLOCK / GRAD_ROWS threads per row):
//              each thread derives the row's (b, t, u) (packed: binary search of batch_offset), the
//              cell's edge occupancies from alpha/beta, and writes its share of the x_grad row in
//              one pass (16-byte packs where the row allows); no cross-thread reduction at all.
// No atomics, no scheduling-dependent order, no dynamic shared memory.
// Values: the CPU module rejects bad lengths, labels, blank_idx and batch_offset before writing; a
// kernel cannot fail a call, so it clamps lengths, labels and blank_idx into range (memory stays in
// bounds, the result is then meaningless) and trusts batch_offset when packed.
#include "gpu/gpu_compat.cuh"

// Tuning (docs/design.md, principle 6): the manifest's `tune` table arrives as -DOPF_TUNE_<NAME>; the
// JIT may override these. Defaults match kernels/manifest.toml.
#ifndef OPF_TUNE_LOSS_BLOCK  // threads per forward block (cells of one anti-diagonal)
#define OPF_TUNE_LOSS_BLOCK 128
#endif
#ifndef OPF_TUNE_LOSS_GRID  // forward blocks; each loops over (batch, lattice) tasks
#define OPF_TUNE_LOSS_GRID 256
#endif
#ifndef OPF_TUNE_GRAD_BLOCK  // threads per backward block
#define OPF_TUNE_GRAD_BLOCK 256
#endif
#ifndef OPF_TUNE_GRAD_ROWS  // x rows per backward block (GRAD_BLOCK / GRAD_ROWS threads each)
#define OPF_TUNE_GRAD_ROWS 4
#endif

#if OPF_TUNE_GRAD_BLOCK % OPF_TUNE_GRAD_ROWS != 0
#error "OPF_TUNE_GRAD_BLOCK must be a multiple of OPF_TUNE_GRAD_ROWS"
#endif

extern "C" {
__constant__ opf_gpu_plan transducer_loss_forward_plan = {
    1, OPF_EXTENT_ONE, 0, {{OPF_EXTENT_ONE, 1, OPF_TUNE_LOSS_GRID, OPF_TUNE_LOSS_BLOCK, 0}}};
// tensor 0 is x: rows = B * T * U1 (padded) or the packed row count
__constant__ opf_gpu_plan transducer_loss_backward_plan = {
    1, OPF_EXTENT_ONE, 0, {{OPF_EXTENT_ROWS, OPF_TUNE_GRAD_ROWS, 1, OPF_TUNE_GRAD_BLOCK, 0}}};
}

namespace {

using namespace opf_gpu;

// From the bits: __int_as_float is device-only (the host emulation lacks it), NVRTC knows no
// __builtin_huge_valf; a union works under every compiler.
OPF_DEVICE float from_bits(unsigned u) {
  union {
    unsigned u;
    float f;
  } b;
  b.u = u;
  return b.f;
}
OPF_DEVICE float neg_inf() { return from_bits(0xff800000u); }
OPF_DEVICE bool is_nan(float v) { return !(v == v); }
OPF_DEVICE bool finite(float v) { return fabsf(v) <= 3.40282347e+38f; }  // false for NaN and +-inf

OPF_DEVICE long long clamp(long long v, long long lo, long long hi) { return v < lo ? lo : (v > hi ? hi : v); }

// log(exp(a) + exp(b)), NaN-propagating, -inf as the empty sum (cpu.cpp's LogAddExp).
OPF_DEVICE float log_add_exp(float a, float b) {
  if (is_nan(a) || is_nan(b)) return a + b;
  const float ninf = neg_inf();
  if (a == ninf) return b;
  if (b == ninf) return a;
  return fmaxf(a, b) + log1pf(expf(-fabsf(a - b)));
}

// The lattice of batch b: lengths (clamped into range), x's rows and the labels.
struct Lattice {
  long long T, U1, V, Tf, Uy, start, row_t, blank;
  const long long* label;  // [U1 - 1] of batch b
};

OPF_DEVICE Lattice lattice(const opf_gpu_args& a, int alpha_arg, int label_arg, int f_arg, int y_arg, int off_arg,
                           long long b) {
  Lattice L;
  L.T = a.arg_shape[alpha_arg][1];
  L.U1 = a.arg_shape[alpha_arg][2];
  L.V = a.cols;
  L.Tf = clamp(static_cast<const long long*>(a.ptr[f_arg])[b], 1, L.T);
  L.Uy = clamp(static_cast<const long long*>(a.ptr[y_arg])[b], 0, L.U1 - 1);
  const bool packed = a.param[1] != 0.0;
  L.start = packed ? (b == 0 ? 0 : static_cast<const long long*>(a.ptr[off_arg])[b - 1]) : b * L.T * L.U1;
  L.row_t = packed ? L.Uy + 1 : L.U1;
  L.blank = clamp((long long)a.param[0], 0, L.V - 1);
  L.label = static_cast<const long long*>(a.ptr[label_arg]) + b * (L.U1 - 1);
  return L;
}

// lp(t, u, v) of the lattice
template <class T>
OPF_DEVICE float lp(const T* x, const Lattice& L, long long t, long long u, long long v) {
  return load(x, (L.start + t * L.row_t + u) * L.V + v);
}
OPF_DEVICE long long label_at(const Lattice& L, long long u) { return clamp(L.label[u], 0, L.V - 1); }

// ------------------------------------------------------------------ forward
// Task k: batch k / 2, alpha (k even) or beta (k odd) with the loss.
template <class T>
__device__ void forward(const opf_gpu_args& a) {
  const T* x = static_cast<const T*>(a.ptr[0]);
  const long long B = a.arg_shape[5][0];
  for (long long task = blockIdx.y; task < 2 * B; task += gridDim.y) {
    const long long b = task / 2;
    const bool is_alpha = task % 2 == 0;
    const Lattice L = lattice(a, 5, 1, 2, 3, 4, b);
    float* out = static_cast<float*>(a.ptr[is_alpha ? 5 : 6]) + b * L.T * L.U1;
    const long long U1 = L.U1, Tf = L.Tf, Uy = L.Uy, K = Tf + Uy;  // K diagonals
    const float ninf = neg_inf();
    // cells outside the lattice: no path
    for (long long i = threadIdx.x; i < L.T * U1; i += OPF_TUNE_LOSS_BLOCK)
      if (i / U1 >= Tf || i % U1 > Uy) out[i] = ninf;
    for (long long s = 0; s < K; ++s) {
      const long long k = is_alpha ? s : K - 1 - s;
      const long long lo = k - Tf + 1 > 0 ? k - Tf + 1 : 0, hi = k < Uy ? k : Uy;
      for (long long u = lo + threadIdx.x; u <= hi; u += OPF_TUNE_LOSS_BLOCK) {
        const long long t = k - u;
        float v;
        if (is_alpha) {
          if (t == 0 && u == 0) v = 0.0f;
          else if (t == 0) v = out[u - 1] + lp(x, L, 0, u - 1, label_at(L, u - 1));
          else if (u == 0) v = out[(t - 1) * U1] + lp(x, L, t - 1, 0, L.blank);
          else
            v = log_add_exp(out[(t - 1) * U1 + u] + lp(x, L, t - 1, u, L.blank),
                            out[t * U1 + u - 1] + lp(x, L, t, u - 1, label_at(L, u - 1)));
        } else {
          const bool last_t = t == Tf - 1, last_u = u == Uy;
          if (last_t && last_u) v = lp(x, L, t, u, L.blank);
          else if (last_t) v = out[t * U1 + u + 1] + lp(x, L, t, u, label_at(L, u));
          else if (last_u) v = out[(t + 1) * U1 + u] + lp(x, L, t, u, L.blank);
          else
            v = log_add_exp(out[(t + 1) * U1 + u] + lp(x, L, t, u, L.blank),
                            out[t * U1 + u + 1] + lp(x, L, t, u, label_at(L, u)));
        }
        out[t * U1 + u] = v;
      }
      __syncthreads();  // diagonal k is complete before k +- 1 reads it
    }
    // beta(0, 0) was written by thread 0 itself (diagonal 0 has the one cell u = 0)
    if (!is_alpha && threadIdx.x == 0) static_cast<float*>(a.ptr[7])[b] = -out[0];
  }
}

// ------------------------------------------------------------------ backward
// exp(a + b) - exp(a + next) without the cancellation; `plain` (exp(a + b) as computed) where the
// edge has no weight (next = -inf) or the inputs are not finite (cpu.cpp's Cancelled).
OPF_DEVICE float cancelled(float a, float b, float next, float plain) {
  if (next == neg_inf() || !finite(a) || !finite(b) || !finite(next))
    return is_nan(next) ? next : plain - expf(a + next);
  return b >= next ? -(expf(a + b) * expm1f(next - b)) : expf(a + next) * expm1f(b - next);
}

// Both edges where a label equals blank: exp(a + b) - exp(a + next) - exp(a + next2), the smaller
// edge subtracted inside the factor (cpu.cpp's CancelledPair).
OPF_DEVICE float cancelled_pair(float a, float b, float next, float next2, float plain) {
  if (next < next2) {
    const float s = next;
    next = next2, next2 = s;
  }
  if (next2 == neg_inf()) return cancelled(a, b, next, plain);
  if (!finite(a) || !finite(b) || !finite(next) || !finite(next2))
    return is_nan(next) || is_nan(next2) ? next + next2 : plain - expf(a + next) - expf(a + next2);
  return b >= next ? -(expf(a + b) * (expm1f(next - b) + expf(next2 - b)))
                   : expf(a + next) * (expm1f(b - next) - expf(next2 - next));
}

// Everything one x_grad row needs, the same for every thread of the row's group.
struct Cell {
  bool pad;             // padding row: exact zeros
  bool fused, has_b;    // has_b: the cell has a blank edge
  long long blank, yu;  // yu = -1 when the cell has no label edge
  float g, occ, eb, ey;
  float a_b, be, bnext;  // cancelled()'s operands of the blank edge
  float a_y, be_y;       // and of the label edge
};

// the gradient of element j (value xv) of the cell's row, before the factor g
OPF_DEVICE float grad_elem(const Cell& c, long long j, float xv) {
  if (!c.fused) {
    float e = 0.0f;
    if (j == c.blank) e -= c.eb;
    if (j == c.yu) e -= c.ey;
    return e;
  }
  float e = c.occ + xv;
  e = e < -87.0f ? 0.0f : expf(e);  // (NaN stays NaN: the comparison is false)
  if (c.yu == c.blank) {
    if (j == c.blank) e = cancelled_pair(c.a_b, c.be, c.bnext, c.be_y, e);
  } else {
    if (j == c.blank && c.has_b) e = cancelled(c.a_b, c.be, c.bnext, e);
    if (j == c.yu) e = cancelled(c.a_y, c.be, c.be_y, e);
  }
  return e;
}

template <class T>
__device__ void backward(const opf_gpu_args& a) {
  constexpr int kThreads = OPF_TUNE_GRAD_BLOCK / OPF_TUNE_GRAD_ROWS;  // per row
  constexpr int P = Pack<T>::n;
  const long long row = (long long)blockIdx.x * OPF_TUNE_GRAD_ROWS + threadIdx.x / kThreads;
  const int lane = threadIdx.x % kThreads;
  if (row >= a.rows) return;
  const T* x = static_cast<const T*>(a.ptr[0]);
  const float* alpha = static_cast<const float*>(a.ptr[2]);
  const float* beta = static_cast<const float*>(a.ptr[3]);
  T* dx = static_cast<T*>(a.ptr[8]);
  const long long B = a.arg_shape[2][0], T_ = a.arg_shape[2][1], U1 = a.arg_shape[2][2], V = a.cols;
  const bool packed = a.param[1] != 0.0;

  // (b, t, u) of this row
  long long b, t, u;
  if (packed) {
    const long long* off = static_cast<const long long*>(a.ptr[7]);
    long long lo = 0, hi = B - 1;  // the first b with off[b] > row
    while (lo < hi) {
      const long long mid = (lo + hi) / 2;
      if (off[mid] > row) hi = mid;
      else lo = mid + 1;
    }
    b = lo;
  } else {
    b = row / (T_ * U1);
  }
  const Lattice L = lattice(a, 2, 6, 4, 5, 7, b);
  if (packed) {
    const long long local = row - L.start;
    t = local / (L.Uy + 1);
    u = local % (L.Uy + 1);
  } else {
    t = row / U1 % T_;
    u = row % U1;
  }
  Cell c = {};                                      // (zeros: no edge weight)
  c.pad = t < 0 || u < 0 || t >= L.Tf || u > L.Uy;  // (t, u < 0: only a wrong batch_offset)
  c.fused = a.param[2] != 0.0;
  c.blank = L.blank;
  c.yu = -1;
  if (!c.pad) {
    const T* xr = x + row * V;
    const float* al = alpha + (b * T_ + t) * U1;
    const float* be = beta + (b * T_ + t) * U1;
    const float total = beta[b * T_ * U1], at = al[u], lpb = load(xr, L.blank);
    c.g = static_cast<const float*>(a.ptr[1])[b];
    c.has_b = t < L.Tf - 1 || u == L.Uy;
    float lpy = 0.0f;
    if (u < L.Uy) {
      c.yu = label_at(L, u);
      lpy = load(xr, c.yu);
    }
    if (!c.fused) {  // (the fused path cancels the edges itself: cancelled())
      if (t < L.Tf - 1) c.eb = expf(at + be[U1 + u] + lpb - total);
      else if (u == L.Uy) c.eb = expf(at + lpb - total);
      if (u < L.Uy) c.ey = expf(at + be[u + 1] + lpy - total);
    }
    c.occ = at + be[u] - total;
    c.a_b = at + lpb - total;
    c.be = be[u];
    // beta after the blank edge (0 after the final blank; -inf: none out of the last frame)
    c.bnext = t < L.Tf - 1 ? be[U1 + u] : u == L.Uy ? 0.0f : neg_inf();
    c.a_y = at + lpy - total;
    c.be_y = u < L.Uy ? be[u + 1] : 0.0f;
  }

  const T* xr = x + row * V;
  T* out = dx + row * V;
  if (V % P == 0 && aligned16(x) && aligned16(dx)) {
    for (long long k = (long long)lane * P; k < V; k += (long long)kThreads * P) {
      Pack<T> q;
      if (c.pad) {
        for (int e = 0; e < P; ++e) from_float(q.v[e], 0.0f);
      } else if (c.fused) {
        const Pack<T> px = load_pack(xr, k);
        for (int e = 0; e < P; ++e) from_float(q.v[e], c.g * grad_elem(c, k + e, to_float(px.v[e])));
      } else {
        for (int e = 0; e < P; ++e) from_float(q.v[e], c.g * grad_elem(c, k + e, 0.0f));
      }
      store_pack(out, k, q);
    }
  } else {
    for (long long j = lane; j < V; j += kThreads) {
      float v = 0.0f;
      if (!c.pad) v = c.g * grad_elem(c, j, c.fused ? load(xr, j) : 0.0f);
      store(out, j, v);
    }
  }
}

}  // namespace

#define OPF_TRANSDUCER_LOSS_KERNELS(SUFFIX, T)                                                               \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_LOSS_BLOCK) transducer_loss_forward_##SUFFIX(opf_gpu_args a) {  \
    forward<T>(a);                                                                                           \
  }                                                                                                          \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_GRAD_BLOCK) transducer_loss_backward_##SUFFIX(opf_gpu_args a) { \
    backward<T>(a);                                                                                          \
  }

OPF_TRANSDUCER_LOSS_KERNELS(f32, float)
OPF_TRANSDUCER_LOSS_KERNELS(f16, opf_gpu::f16)
OPF_TRANSDUCER_LOSS_KERNELS(bf16, opf_gpu::bf16)
