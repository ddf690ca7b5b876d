// opforge GPU portability layer: one kernel.cu compiles for CUDA (nvcc, NVRTC) and HIP (hipcc,
// hiprtc). Kernels use only what is defined here plus the spellings CUDA and HIP share
// (__global__, __device__, __shared__, threadIdx, blockIdx, blockDim, gridDim, __syncthreads).
//
// Compilers this must survive, and why the code looks the way it does:
//   nvcc     full CUDA headers.
//   NVRTC    no host headers at all (no <cstdint>): only the toolkit headers passed with -I.
//   hipcc    clang HIP mode; HIP 5.2 has no *_sync shuffles.
//   hiprtc   already includes its HIP headers (re-including hip_fp16.h breaks it), C++14 default.
// Storage dtypes: float, opf_f16 and opf_bf16; every kernel accumulates in float.
#pragma once

#include "gpu/launch_abi.h"

#if defined(__HIPCC__) || defined(__HIPCC_RTC__) || defined(__HIP_PLATFORM_AMD__)
#define OPF_USE_HIP 1
#else
#define OPF_USE_HIP 0
#endif

#if OPF_USE_HIP
#ifndef __HIPCC_RTC__
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#endif
// Wave64 on CDNA (gfx9xx), wave32 by default on RDNA (gfx10xx/11xx). The macro only exists in the
// device pass; the host pass never runs these functions.
#ifdef __AMDGCN_WAVEFRONT_SIZE
#define OPF_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE
#else
#define OPF_WARP_SIZE 64
#endif
#else
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#ifndef OPF_WARP_SIZE  // predefined only by the host emulation in gpu/tests (wave64 runs)
#define OPF_WARP_SIZE 32
#endif
#endif

#define OPF_DEVICE __device__ __forceinline__
// Every kernel states its block size so the compiler may budget registers for it.
#define OPF_LAUNCH_BOUNDS(threads) __launch_bounds__(threads)
#ifndef OPF_KERNEL  // the host emulation in gpu/tests exports kernels as plain functions
#define OPF_KERNEL extern "C" __global__
#endif

namespace opf_gpu {

// ------------------------------------------------------------------ warp primitives
OPF_DEVICE float shfl_xor(float v, int lane_mask) {
#if OPF_USE_HIP
  return __shfl_xor(v, lane_mask);
#else
  return __shfl_xor_sync(0xffffffffu, v, lane_mask);
#endif
}

// ------------------------------------------------------------------ storage dtypes
#if OPF_USE_HIP
typedef __half f16;
// HIP 5.2's hip_bfloat16 is a host/device class whose header hiprtc does not carry; the bits
// are all a kernel needs (round-to-nearest-even, NaN kept quiet, as in opforge/dtype.h).
struct bf16 {
  unsigned short bits;
};
#else
typedef __half f16;
typedef __nv_bfloat16 bf16;
#endif

OPF_DEVICE float to_float(float v) { return v; }
OPF_DEVICE float to_float(f16 v) { return __half2float(v); }
OPF_DEVICE void from_float(float& dst, float v) { dst = v; }
OPF_DEVICE void from_float(f16& dst, float v) {
#if OPF_USE_HIP
  dst = __float2half(v);
#else
  dst = __float2half_rn(v);
#endif
}
#if OPF_USE_HIP
OPF_DEVICE float to_float(bf16 v) { return __uint_as_float((unsigned)v.bits << 16); }
OPF_DEVICE void from_float(bf16& dst, float v) {
  unsigned u = __float_as_uint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    dst.bits = (unsigned short)((u >> 16) | 0x40u);
    return;
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  dst.bits = (unsigned short)(u >> 16);
}
#else
OPF_DEVICE float to_float(bf16 v) { return __bfloat162float(v); }
OPF_DEVICE void from_float(bf16& dst, float v) { dst = __float2bfloat16_rn(v); }
#endif

template <class T>
OPF_DEVICE float load(const T* p, long long i) {
  return to_float(p[i]);
}
template <class T>
OPF_DEVICE void store(T* p, long long i, float v) {
  from_float(p[i], v);
}

// 16-byte packs: one load/store instruction moves 4 f32 or 8 f16/bf16 values. Usable when every
// pointer involved is 16-byte aligned and the row length is a multiple of Pack<T>::n.
template <class T>
struct alignas(16) Pack {
  static constexpr int n = 16 / sizeof(T);
  T v[n];
};

template <class T>
OPF_DEVICE Pack<T> load_pack(const T* p, long long i) {  // elements i .. i + n - 1
  return *reinterpret_cast<const Pack<T>*>(p + i);
}
template <class T>
OPF_DEVICE void store_pack(T* p, long long i, const Pack<T>& v) {
  *reinterpret_cast<Pack<T>*>(p + i) = v;
}
OPF_DEVICE bool aligned16(const void* p) { return ((unsigned long long)p & 15u) == 0; }

// 1/sqrt: CUDA's rsqrtf (2 ulp), ROCm's 1/sqrtf, as the reference implementations do (ops.md P0-1).
OPF_DEVICE float rsqrt(float v) {
#if OPF_USE_HIP
  return 1.0f / sqrtf(v);
#else
  return rsqrtf(v);
#endif
}

// ------------------------------------------------------------------ reductions
// Running mean/variance (Welford) per thread, merged with Chan's pairwise formula.
struct Welford {
  float n, mean, m2;
};

OPF_DEVICE Welford welford_push(Welford w, float x) {
  w.n += 1.0f;
  const float d = x - w.mean;
  w.mean += d / w.n;
  w.m2 += d * (x - w.mean);
  return w;
}

OPF_DEVICE Welford welford_merge(Welford a, Welford b) {
  const float n = a.n + b.n;
  if (n == 0.0f) return a;
  const float d = b.mean - a.mean, fb = b.n / n;
  Welford r;
  r.n = n;
  r.mean = a.mean + d * fb;
  r.m2 = a.m2 + b.m2 + d * d * a.n * fb;
  return r;
}

OPF_DEVICE Welford warp_welford(Welford w) {
  for (int m = OPF_WARP_SIZE / 2; m > 0; m /= 2) {
    Welford o;
    o.n = shfl_xor(w.n, m);
    o.mean = shfl_xor(w.mean, m);
    o.m2 = shfl_xor(w.m2, m);
    w = welford_merge(w, o);
  }
  return w;
}

// Merges every thread's Welford state of a BLOCK-thread block; all threads get the result.
// The merge order is fixed, so the result is deterministic.
template <int BLOCK>
OPF_DEVICE Welford block_welford(Welford w) {
  constexpr int kWarps = (BLOCK + OPF_WARP_SIZE - 1) / OPF_WARP_SIZE;
  __shared__ Welford partial[kWarps];
  __shared__ Welford total;
  w = warp_welford(w);
  const int lane = threadIdx.x % OPF_WARP_SIZE, warp = threadIdx.x / OPF_WARP_SIZE;
  if (lane == 0) partial[warp] = w;
  __syncthreads();
  if (threadIdx.x == 0) {
    Welford t = partial[0];
    for (int i = 1; i < kWarps; ++i) t = welford_merge(t, partial[i]);
    total = t;
  }
  __syncthreads();
  return total;
}

OPF_DEVICE float warp_sum(float v) {
  for (int m = OPF_WARP_SIZE / 2; m > 0; m /= 2) v += shfl_xor(v, m);
  return v;
}

// Sums one value over a BLOCK-thread block in a fixed order (deterministic); all threads get it.
template <int BLOCK>
OPF_DEVICE float block_sum(float v) {
  constexpr int kWarps = (BLOCK + OPF_WARP_SIZE - 1) / OPF_WARP_SIZE;
  __shared__ float partial[kWarps];
  __shared__ float total;
  v = warp_sum(v);
  const int lane = threadIdx.x % OPF_WARP_SIZE, warp = threadIdx.x / OPF_WARP_SIZE;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.0f;
    for (int i = 0; i < kWarps; ++i) s += partial[i];
    total = s;
  }
  __syncthreads();
  return total;
}

// Sums two values over a BLOCK-thread block (one pass, one barrier pair); all threads get both.
template <int BLOCK>
OPF_DEVICE void block_sum2(float& a, float& b) {
  constexpr int kWarps = (BLOCK + OPF_WARP_SIZE - 1) / OPF_WARP_SIZE;
  __shared__ float pa[kWarps], pb[kWarps];
  __shared__ float ta, tb;
  a = warp_sum(a);
  b = warp_sum(b);
  const int lane = threadIdx.x % OPF_WARP_SIZE, warp = threadIdx.x / OPF_WARP_SIZE;
  if (lane == 0) {
    pa[warp] = a;
    pb[warp] = b;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float sa = 0.0f, sb = 0.0f;
    for (int i = 0; i < kWarps; ++i) {
      sa += pa[i];
      sb += pb[i];
    }
    ta = sa;
    tb = sb;
  }
  __syncthreads();
  a = ta;
  b = tb;
}

}  // namespace opf_gpu
