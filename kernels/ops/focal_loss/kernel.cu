// focal_loss — GPU kernels, one text for CUDA and HIP (see gpu/gpu_compat.cuh), launched through
// the plans below by the generic host launcher (gpu/launch_abi.h).
//
// Contract: ref.cpp. forward (logits T [N, Cpad], labels i64 [N], num_positives_sum f32 [1]) ->
// (loss f32 [1], partial_grad T [N, Cpad]); backward (grad_loss f32 [1], partial_grad T [N, Cpad]
// inout, num_positives_sum f32 [1]): partial_grad *= grad_loss / num_positives_sum in place.
// Storage T = f32 | f16 | bf16, accumulation f32.
//   forward s0   block b takes rows [b R, b R + R) (R = ROWS_PER_BLOCK) as one flat run of R Cpad
//                elements, in 16-byte packs (Cpad is a multiple of a pack, so a pack never straddles
//                rows): each logit is read once and its partial gradient written once (ignored rows
//                and whole padding packs are written as zeros without reading the logits), the loss
//                terms summed per thread, then over the block in a fixed order; the block's sum goes
//                to workspace[b] (f32).
//   forward s1   one block sums the ceil(N / R) block sums in a fixed order and writes
//                loss = sum / num_positives_sum (0 for N = 0).
//   backward     a fixed grid of BWD_GRID blocks (tensor 0 is grad_loss [1]: no size to scale with;
//                the element count comes from arg_shape of partial_grad) strides over partial_grad
//                in 16-byte packs, UNROLL packs in flight per thread; scale = grad_loss / num_pos in f32.
// No atomics: the loss has the same bits on every run (for one warp size and tuning).
// Per element (as cpu.cpp): z = x for a negative, -x for the positive; e = exp(-|x|), u = sigmoid(z),
// v = 1 - u from e without cancellation; A = softplus(z), B = softplus(-z) share log1p(e);
// BCE = (1 - s/2) A + (s/2) B; w = weight * u^gamma (1, u, u*u for gamma 0, 1, 2; exp(-gamma B) else);
// gradient +-w (gamma v BCE + u - s/2). A non-finite logit of a real class in a counted row gives
// a NaN gradient element and a NaN loss term.
//
// Labels: the CPU module fails the call on a label outside [-2, num_real_classes). A kernel cannot
// fail a call: such a row gets NaN partial gradients on its real classes and makes the loss NaN
// (padding classes stay exact zeros); no logit is read out of bounds.
#include "gpu/gpu_compat.cuh"

// Tuning (docs/design.md, principle 6): the manifest's `tune` table arrives as -DOPF_TUNE_<NAME>; the
// JIT may override these. Defaults match kernels/manifest.toml.
#ifndef OPF_TUNE_BLOCK  // threads per block, every stage
#define OPF_TUNE_BLOCK 256
#endif
#ifndef OPF_TUNE_ROWS_PER_BLOCK  // forward: rows per block (one loss partial each)
#define OPF_TUNE_ROWS_PER_BLOCK 64
#endif
#ifndef OPF_TUNE_BWD_GRID  // backward: blocks of the fixed grid-stride grid
#define OPF_TUNE_BWD_GRID 512
#endif
#ifndef OPF_TUNE_UNROLL  // backward: packs per thread in flight
#define OPF_TUNE_UNROLL 4
#endif

#if OPF_TUNE_BLOCK % 64 != 0 || OPF_TUNE_BLOCK > 1024
#error "OPF_TUNE_BLOCK must be a multiple of 64 (whole warps of 32 and wavefronts of 64), at most 1024"
#endif
#if OPF_TUNE_ROWS_PER_BLOCK < 1 || OPF_TUNE_BWD_GRID < 1 || OPF_TUNE_UNROLL < 1
#error "OPF_TUNE_ROWS_PER_BLOCK, OPF_TUNE_BWD_GRID and OPF_TUNE_UNROLL must be >= 1"
#endif

extern "C" {
// forward: workspace = one f32 per row (>= one per block of ROWS_PER_BLOCK rows)
__constant__ opf_gpu_plan focal_loss_forward_plan = {
    2,
    OPF_EXTENT_ROWS,
    (int)sizeof(float),
    {{OPF_EXTENT_ROWS, OPF_TUNE_ROWS_PER_BLOCK, 1, OPF_TUNE_BLOCK, 0}, {OPF_EXTENT_ONE, 1, 1, OPF_TUNE_BLOCK, 0}}};
// backward: tensor 0 is grad_loss [1]; a fixed grid (x = 1, y = BWD_GRID)
__constant__ opf_gpu_plan focal_loss_backward_plan = {
    1, OPF_EXTENT_ONE, 0, {{OPF_EXTENT_ONE, 1, OPF_TUNE_BWD_GRID, OPF_TUNE_BLOCK, 0}}};
}

namespace {

using namespace opf_gpu;

// From the bits: __int_as_float is device-only (the host emulation lacks it), NVRTC knows no
// __builtin_nanf; a union works under every compiler.
OPF_DEVICE float nan_value() {
  union {
    unsigned u;
    float f;
  } b;
  b.u = 0x7fc00000u;
  return b.f;
}
OPF_DEVICE bool finite(float v) { return fabsf(v) <= 3.40282347e+38f; }  // false for NaN and +-inf

struct Consts {
  float alpha, beta, gamma, tn, kn;  // beta = 1 - alpha, tn = s/2 (a negative's target), kn = 1 - s/2
};

// One logit x of a real class; pos: it is the row's positive class. Returns the partial gradient
// and adds the loss term to acc (NaN for a non-finite logit, in both).
template <int G>
OPF_DEVICE float element(float x, bool pos, const Consts& k, float& acc) {
  if (!finite(x)) {
    acc = nan_value();
    return nan_value();
  }
  const float z = pos ? -x : x;
  const float e = expf(-fabsf(x));
  const float l = log1pf(e);
  const float A = fmaxf(z, 0.0f) + l;   // softplus(z)
  const float B = fmaxf(-z, 0.0f) + l;  // softplus(-z) = -log u
  const float r = 1.0f / (1.0f + e);
  const float er = e * r;
  const bool z_nonneg = z >= 0.0f;
  const float u = z_nonneg ? r : er, v = z_nonneg ? er : r;
  const float bce = k.kn * A + k.tn * B;
  float w = pos ? k.alpha : k.beta;
  if (G == 1) w *= u;
  else if (G == 2) w *= u * u;
  else if (G < 0) w *= expf(-k.gamma * B);
  float inner = u - k.tn;
  if (G != 0) inner += k.gamma * v * bce;
  const float g = w * inner;
  acc += w * bce;
  return pos ? -g : g;
}

// The partial gradient of element `col` of a row with label y (kept as a long long: any i64).
template <int G>
OPF_DEVICE float grad_of(float x, long long col, long long y, long long real, const Consts& k, float& acc) {
  if (col >= real) return 0.0f;  // padding class (real > Cpad: every class is real)
  if (y < -1 || y >= real) {     // y == -2 never gets here; an invalid label: NaN (see header)
    acc = nan_value();
    return nan_value();
  }
  return element<G>(x, col == y, k, acc);
}

// Rows [r0, r0 + nr) as a flat run of nr * cols elements, K elements (one pack or one element) per
// step; returns this thread's loss sum. lab: the rows' labels.
template <int G, int K, class T>
OPF_DEVICE float forward_rows(const T* x, T* g, const long long* lab, long long nr, long long cols, long long real,
                              const Consts& k) {
  float acc = 0.0f;
  const long long step = (long long)OPF_TUNE_BLOCK * K, drow = step / cols, dcol = step % cols;
  long long row = ((long long)threadIdx.x * K) / cols, col = ((long long)threadIdx.x * K) % cols;
  for (; row < nr; row += drow, col += dcol) {
    if (col >= cols) {
      col -= cols;
      ++row;
      if (row >= nr) break;
    }
    const long long y = lab[row], off = row * cols + col;
    if (K == 1) {
      if (y == -2 || col >= real) store(g, off, 0.0f);
      else store(g, off, grad_of<G>(load(x, off), col, y, real, k, acc));
    } else {
      Pack<T> pg;
      if (y == -2 || col >= real) {  // the whole pack is zeros: the logits are not read
        for (int e = 0; e < K; ++e) from_float(pg.v[e], 0.0f);
      } else {
        const Pack<T> px = load_pack(x, off);
        for (int e = 0; e < K; ++e) from_float(pg.v[e], grad_of<G>(to_float(px.v[e]), col + e, y, real, k, acc));
      }
      store_pack(g, off, pg);
    }
  }
  return acc;
}

template <int G, class T>
__device__ void forward_partial_g(const opf_gpu_args& a, const long long* lab, long long r0, long long nr) {
  constexpr int V = Pack<T>::n;
  const long long cols = a.cols, real = (long long)a.param[0];
  const float alpha = (float)a.param[1], s = (float)a.param[3];
  const Consts k{alpha, 1.0f - alpha, (float)a.param[2], s / 2, 1.0f - s / 2};
  const T* x = static_cast<const T*>(a.ptr[0]) + r0 * cols;
  T* g = static_cast<T*>(a.ptr[4]) + r0 * cols;
  const bool packed = cols % V == 0 && aligned16(a.ptr[0]) && aligned16(a.ptr[4]);
  float acc =
      packed ? forward_rows<G, V>(x, g, lab, nr, cols, real, k) : forward_rows<G, 1>(x, g, lab, nr, cols, real, k);
  acc = block_sum<OPF_TUNE_BLOCK>(acc);
  if (threadIdx.x == 0) static_cast<float*>(a.workspace)[blockIdx.x] = acc;
}

template <class T>
__device__ void forward_partial(const opf_gpu_args& a) {
  const long long r0 = (long long)blockIdx.x * OPF_TUNE_ROWS_PER_BLOCK;
  const long long left = a.rows - r0, nr = left < OPF_TUNE_ROWS_PER_BLOCK ? left : OPF_TUNE_ROWS_PER_BLOCK;
  __shared__ long long lab[OPF_TUNE_ROWS_PER_BLOCK];
  const long long* labels = static_cast<const long long*>(a.ptr[1]);
  for (long long i = threadIdx.x; i < nr; i += OPF_TUNE_BLOCK) lab[i] = labels[r0 + i];
  __syncthreads();
  const float gamma = (float)a.param[2];  // the same tests as cpu.cpp: 0, 1, 2 are exact fast paths
  if (gamma == 0.0f) forward_partial_g<0, T>(a, lab, r0, nr);
  else if (gamma == 1.0f) forward_partial_g<1, T>(a, lab, r0, nr);
  else if (gamma == 2.0f) forward_partial_g<2, T>(a, lab, r0, nr);
  else forward_partial_g<-1, T>(a, lab, r0, nr);
}

// One block: the block sums in order, then the loss.
__device__ void forward_loss(const opf_gpu_args& a) {
  const long long nb = (a.rows + OPF_TUNE_ROWS_PER_BLOCK - 1) / OPF_TUNE_ROWS_PER_BLOCK;
  const float* ws = static_cast<const float*>(a.workspace);
  float acc = 0.0f;
  for (long long i = threadIdx.x; i < nb; i += OPF_TUNE_BLOCK) acc += ws[i];
  acc = block_sum<OPF_TUNE_BLOCK>(acc);
  if (threadIdx.x == 0) {
    const float np = *static_cast<const float*>(a.ptr[2]);
    *static_cast<float*>(a.ptr[3]) = nb == 0 ? 0.0f : acc / np;  // N = 0: an empty sum, 0
  }
}

template <class T>
__device__ void backward(const opf_gpu_args& a) {
  constexpr int V = Pack<T>::n;
  long long n = 1;
  for (int d = 0; d < a.arg_ndim[1]; ++d) n *= a.arg_shape[1][d];
  T* g = static_cast<T*>(a.ptr[1]);
  const float scale = *static_cast<const float*>(a.ptr[0]) / *static_cast<const float*>(a.ptr[2]);
  const long long stride = (long long)gridDim.y * OPF_TUNE_BLOCK;
  const long long tid = (long long)blockIdx.y * OPF_TUNE_BLOCK + threadIdx.x;
  long long done = 0;  // elements handled in packs
  if (aligned16(g)) {
    const long long npacks = n / V;
    long long p = tid;
    for (; p + (OPF_TUNE_UNROLL - 1) * stride < npacks; p += OPF_TUNE_UNROLL * stride) {
      Pack<T> v[OPF_TUNE_UNROLL];
      for (int u = 0; u < OPF_TUNE_UNROLL; ++u) v[u] = load_pack(g, (p + u * stride) * V);
      for (int u = 0; u < OPF_TUNE_UNROLL; ++u) {
        for (int e = 0; e < V; ++e) from_float(v[u].v[e], to_float(v[u].v[e]) * scale);
        store_pack(g, (p + u * stride) * V, v[u]);
      }
    }
    for (; p < npacks; p += stride) {
      Pack<T> v = load_pack(g, p * V);
      for (int e = 0; e < V; ++e) from_float(v.v[e], to_float(v.v[e]) * scale);
      store_pack(g, p * V, v);
    }
    done = npacks * V;
  }
  for (long long i = done + tid; i < n; i += stride) store(g, i, load(g, i) * scale);
}

}  // namespace

#define OPF_FOCAL_LOSS_KERNELS(SUFFIX, T)                                                              \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) focal_loss_forward_##SUFFIX(opf_gpu_args a) {      \
    forward_partial<T>(a);                                                                             \
  }                                                                                                    \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) focal_loss_forward_##SUFFIX##_s1(opf_gpu_args a) { \
    forward_loss(a);                                                                                   \
  }                                                                                                    \
  OPF_KERNEL void OPF_LAUNCH_BOUNDS(OPF_TUNE_BLOCK) focal_loss_backward_##SUFFIX(opf_gpu_args a) { backward<T>(a); }

OPF_FOCAL_LOSS_KERNELS(f32, float)
OPF_FOCAL_LOSS_KERNELS(f16, opf_gpu::f16)
OPF_FOCAL_LOSS_KERNELS(bf16, opf_gpu::bf16)
