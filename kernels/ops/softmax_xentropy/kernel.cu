// softmax_xentropy — GPU kernels, one text for CUDA and HIP (see gpu/gpu_compat.cuh), launched through
// the plans below by the generic host launcher (gpu/launch_abi.h).
//
// Contract: ref.cpp. forward (logits [N, C], labels i64 [N]) -> (losses f32 [N], max_log_sum_exp f32 [N]);
// backward (grad_losses f32 [N], logits [N, C], max_log_sum_exp f32 [N], labels i64 [N]) -> grad_logits [N, C].
// Storage T = f32 | f16 | bf16, accumulation f32.
//   forward    one block per row, one pass over the logits (online softmax): each thread keeps the
//              max m of the finite logits it has seen, S = sum exp(x - m) and T = sum (x - m),
//              rescaled when m grows; the block merges the threads' states in a fixed order. Then
//              lse = m + log S, loss = log S + (1-s)(m - x_y) - (s/C) T (ref.cpp's form: non-negative
//              terms, T only when s != 0). NaN/+inf and -inf logits are flags, never arithmetic.
//   backward   one block per row (the grid's extent is tensor 0 = grad_losses [N]: COLS = N; C comes
//              from arg_shape of the logits): dx = g exp(x - lse) - g s/C (- g (1-s) at the label),
//              rounded once to T; padding rows are written as exact zeros without reading the logits.
// Rows move in 16-byte packs from their first 16-byte boundary (the few elements before it and after
// the last whole pack one by one), so odd C (50257) is still read and written in packs.
// No atomics, no workspace: every result is bitwise reproducible run to run.
//
// Backward kernels are named by the logits' storage dtype T, like forward's (the launcher names
// kernels by the first argument of dtype T, core/gpu_module.h).
//
// Labels: the CPU module fails the call on a label that is neither padding_idx nor in [0, C). A
// kernel cannot fail a call: such a row gets a NaN loss (forward) and a NaN gradient row (backward),
// and no logit is read out of bounds.
#include "gpu/gpu_compat.cuh"

// Tuning (docs/design.md, principle 6): the manifest's `tune` table arrives as -DOPF_TUNE_<NAME>; the
// JIT may override it. Default matches kernels/manifest.toml.
#ifndef OPF_TUNE_BLOCK  // threads per block (one block per row, both entries)
#define OPF_TUNE_BLOCK 256
#endif

#if OPF_TUNE_BLOCK % 64 != 0 || OPF_TUNE_BLOCK > 1024
#error "OPF_TUNE_BLOCK must be a multiple of 64 (whole warps of 32 and wavefronts of 64), at most 1024"
#endif

extern "C" {
__constant__ opf_gpu_plan softmax_xentropy_forward_plan = {
    1, OPF_EXTENT_ONE, 0, {{OPF_EXTENT_ROWS, 1, 1, OPF_TUNE_BLOCK, 0}}};
// tensor 0 is grad_losses [N]: rows = 1, cols = N
__constant__ opf_gpu_plan softmax_xentropy_backward_plan = {
    1, OPF_EXTENT_ONE, 0, {{OPF_EXTENT_COLS, 1, 1, OPF_TUNE_BLOCK, 0}}};
}

namespace {

using namespace opf_gpu;

// From the bits: __int_as_float is device-only (the host emulation lacks it), NVRTC knows no
// __builtin_nanf/__builtin_huge_valf; a union works under every compiler.
OPF_DEVICE float from_bits(unsigned u) {
  union {
    unsigned u;
    float f;
  } b;
  b.u = u;
  return b.f;
}
OPF_DEVICE float nan_value() { return from_bits(0x7fc00000u); }
OPF_DEVICE float inf_value() { return from_bits(0x7f800000u); }
OPF_DEVICE bool finite(float v) { return fabsf(v) <= 3.40282347e+38f; }  // false for NaN and +-inf

// Elements of the row at p before its first 16-byte boundary (all of them when p is not even
// T-aligned, which a valid T* always is).
template <class T>
OPF_DEVICE long long head_length(const T* p, long long cols) {
  const unsigned off = (unsigned)((unsigned long long)p & 15u);
  if (off % sizeof(T) != 0) return cols;
  const long long h = off == 0 ? 0 : (long long)((16u - off) / sizeof(T));
  return h < cols ? h : cols;
}

// ------------------------------------------------------------------ forward
// One thread's (or a merged group's) view of a row: m = max of the finite logits seen (only
// meaningful when n > 0), s = sum exp(x - m), t = sum (x - m), n = how many finite logits,
// bad = a NaN or +inf was seen (the row is NaN), ninf = a -inf was seen (T = -inf).
struct Acc {
  float m, s, t, n, bad, ninf;
};

template <int K>
OPF_DEVICE void push(Acc& a, const float (&v)[K]) {
  float pm = a.m;
  for (int e = 0; e < K; ++e) {
    if (finite(v[e])) pm = fmaxf(pm, v[e]);
    else if (v[e] < 0.0f) a.ninf = 1.0f;
    else a.bad = 1.0f;  // NaN or +inf
  }
  if (pm > a.m) {
    if (a.n > 0.0f) {
      a.s *= expf(a.m - pm);
      a.t += a.n * (a.m - pm);
    }
    a.m = pm;
  }
  for (int e = 0; e < K; ++e)
    if (finite(v[e])) {
      const float d = v[e] - a.m;
      a.s += expf(d);
      a.t += d;
      a.n += 1.0f;
    }
}

OPF_DEVICE Acc merge(const Acc& a, const Acc& b) {
  Acc r;
  r.m = fmaxf(a.m, b.m);
  r.s = 0.0f;
  r.t = 0.0f;
  if (a.n > 0.0f) {
    r.s += a.s * expf(a.m - r.m);
    r.t += a.t + a.n * (a.m - r.m);
  }
  if (b.n > 0.0f) {
    r.s += b.s * expf(b.m - r.m);
    r.t += b.t + b.n * (b.m - r.m);
  }
  r.n = a.n + b.n;
  r.bad = fmaxf(a.bad, b.bad);
  r.ninf = fmaxf(a.ninf, b.ninf);
  return r;
}

// The merged state of the whole block, valid in thread 0 only (fixed merge order: deterministic).
template <int BLOCK>
OPF_DEVICE Acc block_merge(Acc a) {
  constexpr int kWarps = BLOCK / OPF_WARP_SIZE;
  __shared__ Acc part[kWarps];
  for (int o = OPF_WARP_SIZE / 2; o > 0; o /= 2) {
    Acc b;
    b.m = shfl_xor(a.m, o);
    b.s = shfl_xor(a.s, o);
    b.t = shfl_xor(a.t, o);
    b.n = shfl_xor(a.n, o);
    b.bad = shfl_xor(a.bad, o);
    b.ninf = shfl_xor(a.ninf, o);
    a = merge(a, b);
  }
  const int lane = threadIdx.x % OPF_WARP_SIZE, warp = threadIdx.x / OPF_WARP_SIZE;
  if (lane == 0) part[warp] = a;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int i = 1; i < kWarps; ++i) a = merge(a, part[i]);
  return a;
}

template <class T>
__device__ void forward(const opf_gpu_args& a) {
  constexpr int V = Pack<T>::n;
  const long long row = blockIdx.x, cols = a.cols;
  const T* x = static_cast<const T*>(a.ptr[0]) + row * cols;
  const long long* labels = static_cast<const long long*>(a.ptr[1]);
  const float smoothing = (float)a.param[0];
  const long long padding_idx = (long long)a.param[1];

  Acc acc = {-3.40282347e+38f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  const long long head = head_length(x, cols), packs = (cols - head) / V, tail = head + packs * V;
  for (long long j = threadIdx.x; j < head; j += OPF_TUNE_BLOCK) {
    const float v[1] = {load(x, j)};
    push(acc, v);
  }
  const T* body = x + head;
  for (long long k = threadIdx.x; k < packs; k += OPF_TUNE_BLOCK) {
    const Pack<T> p = load_pack(body, k * V);
    float v[V];
    for (int e = 0; e < V; ++e) v[e] = to_float(p.v[e]);
    push(acc, v);
  }
  for (long long j = tail + threadIdx.x; j < cols; j += OPF_TUNE_BLOCK) {
    const float v[1] = {load(x, j)};
    push(acc, v);
  }
  acc = block_merge<OPF_TUNE_BLOCK>(acc);
  if (threadIdx.x != 0) return;

  const long long y = labels[row];
  const bool pad = y == padding_idx;
  float lse, loss;
  if (acc.bad > 0.0f || acc.n == 0.0f) {  // a NaN, or a max of +-inf (inf - inf)
    lse = nan_value();
    loss = pad ? 0.0f : nan_value();
  } else {
    const float log_sum = logf(acc.s);
    lse = acc.m + log_sum;
    if (pad) {
      loss = 0.0f;
    } else if (y < 0 || y >= cols) {
      loss = nan_value();  // not a class and not padding (the CPU module fails the call)
    } else {
      loss = log_sum + (1.0f - smoothing) * (acc.m - load(x, y));
      // s = 0: plain cross entropy (T is not used: no 0 * -inf)
      if (smoothing != 0.0f) loss = loss - smoothing / (float)cols * (acc.ninf > 0.0f ? -inf_value() : acc.t);
    }
  }
  static_cast<float*>(a.ptr[2])[row] = loss;
  static_cast<float*>(a.ptr[3])[row] = lse;
}

// ------------------------------------------------------------------ backward
// Writes dx[c] = f(x[c], c) over one row in the block's threads (x is not read when kRead is
// false); 16-byte packs from the row's first 16-byte boundary when x and dx share it.
template <bool kRead, class T, class F>
OPF_DEVICE void map_row(const T* x, T* dx, long long cols, bool same_phase, F f) {
  constexpr int V = Pack<T>::n;
  const long long head = same_phase ? head_length(dx, cols) : cols, packs = (cols - head) / V, tail = head + packs * V;
  for (long long j = threadIdx.x; j < head; j += OPF_TUNE_BLOCK) store(dx, j, f(kRead ? load(x, j) : 0.0f, j));
  for (long long k = threadIdx.x; k < packs; k += OPF_TUNE_BLOCK) {
    const long long c0 = head + k * V;
    Pack<T> out;
    if (kRead) {
      const Pack<T> in = load_pack(x, c0);
      for (int e = 0; e < V; ++e) from_float(out.v[e], f(to_float(in.v[e]), c0 + e));
    } else {
      for (int e = 0; e < V; ++e) from_float(out.v[e], f(0.0f, c0 + e));
    }
    store_pack(dx, c0, out);
  }
  for (long long j = tail + threadIdx.x; j < cols; j += OPF_TUNE_BLOCK) store(dx, j, f(kRead ? load(x, j) : 0.0f, j));
}

template <class T>
__device__ void backward(const opf_gpu_args& a) {
  const long long row = blockIdx.x, rows = a.arg_shape[1][0], cols = a.arg_shape[1][1];
  if (row >= rows) return;
  const float g = static_cast<const float*>(a.ptr[0])[row];
  const T* x = static_cast<const T*>(a.ptr[1]) + row * cols;
  const float lse = static_cast<const float*>(a.ptr[2])[row];
  const long long y = static_cast<const long long*>(a.ptr[3])[row];
  T* dx = static_cast<T*>(a.ptr[4]) + row * cols;
  const long long padding_idx = (long long)a.param[1];
  const bool same_phase = (((unsigned long long)a.ptr[1] ^ (unsigned long long)a.ptr[4]) & 15u) == 0;

  if (y == padding_idx) {  // exact zeros, whatever the logits and g hold
    map_row<false>(x, dx, cols, true, [](float, long long) { return 0.0f; });
    return;
  }
  if (y < 0 || y >= cols) {  // not a class and not padding (the CPU module fails the call)
    const float nan = nan_value();
    map_row<false>(x, dx, cols, true, [nan](float, long long) { return nan; });
    return;
  }
  // dx = g e - g s/C, and g e - g (1 - s + s/C) at the label (as cpu.cpp: the targets rounded once
  // from double, so that C = 1 cancels to exactly 0)
  const double s = a.param[0];
  const float spread = (float)(s / (double)cols), target_label = (float)((1.0 - s) + s / (double)cols);
  const float off = -(g * spread), off_label = -(g * target_label);
  map_row<true>(x, dx, cols, same_phase,
                [=](float v, long long c) { return g * expf(v - lse) + (c == y ? off_label : off); });
}

}  // namespace

#define OPF_SOFTMAX_XENTROPY_KERNELS(SUFFIX, T)                                                          \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) softmax_xentropy_forward_##SUFFIX(opf_gpu_args a) {  \
    forward<T>(a);                                                                                       \
  }                                                                                                      \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) softmax_xentropy_backward_##SUFFIX(opf_gpu_args a) { \
    backward<T>(a);                                                                                      \
  }

OPF_SOFTMAX_XENTROPY_KERNELS(f32, float)
OPF_SOFTMAX_XENTROPY_KERNELS(f16, opf_gpu::f16)
OPF_SOFTMAX_XENTROPY_KERNELS(bf16, opf_gpu::bf16)
