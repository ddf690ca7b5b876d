/* Per-op GPU host launch code — the optional part of a GPU module (ABI v2).
 *
 * Most ops need no host code: the generic launcher (core/gpu_module.h) runs the stages of the
 * plan their kernel.cu carries (gpu/launch_abi.h), multi-tensor chunking of lists included. An op
 * whose launch needs decisions on the host — a cuBLASLt GEMM with an epilogue (fused_dense), a
 * grid sized from a param — adds kernels/ops/<op>/launch.cpp. Meson compiles it, for every
 * enabled GPU backend and in every mode, into opf_<op>_<backend>_launch.so (plain host C++: the
 * JIT compiles device code only), linking the op's manifest `deps` for that backend (e.g.
 * `cuda = ["cublasLt"]`). The loader opens it beside the op's code object, and the module's
 * run/supports call the launcher instead of the generic plan.
 *
 * launch.cpp defines (C linkage, default visibility):
 *     const opf_gpu_launcher* opf_gpu_launcher_table(void);
 * Its run/supports get a context for the op's own code object: kernels by name, launches with the
 * opf_gpu_args convention, a workspace reused across calls, and the backend's error text.
 * OPF_LAUNCH_CUDA, OPF_LAUNCH_HIP or OPF_LAUNCH_EMU (the GPU emulation of gpu/tests, which runs
 * the op's kernels on the host) says which backend a build is for.
 */
#ifndef OPFORGE_GPU_LAUNCHER_H
#define OPFORGE_GPU_LAUNCHER_H

#include "gpu/launch_abi.h"
#include "opforge/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct opf_gpu_launch_ctx {
  void* impl;
  const char* backend; /* "cuda" | "hip" (tests: "emu") */
  const char* arch;    /* "sm_90", "gfx90a", ... */
  /* The kernel `name` of the op's code object (e.g. "fused_adam_step_f32"); 0 on success. */
  int (*kernel)(void* impl, const char* name, void** fn);
  /* Launches fn on a (gx, gy) grid of `block` threads with `shared` bytes of dynamic shared memory
   * on `stream`, passing *args by value; 0 on success. */
  int (*launch)(void* impl, void* fn, unsigned gx, unsigned gy, unsigned block, unsigned shared, void* stream,
                opf_gpu_args* args);
  /* Device scratch of at least `bytes`, reused by later calls of this module (calls of one module
   * are ordered); 0 on success. */
  int (*workspace)(void* impl, size_t bytes, void** ptr);
  /* One-line text of a status returned by the functions above. */
  void (*error)(void* impl, int status, char* buf, size_t len);
} opf_gpu_launch_ctx;

typedef int (*opf_gpu_launch_fn)(const opf_gpu_launch_ctx* ctx, const opf_call* call, char* err, size_t err_len);

typedef struct opf_gpu_launcher {
  uint32_t abi_version;       /* OPF_ABI_VERSION */
  const char* op;             /* manifest key */
  opf_gpu_launch_fn run;      /* 0 on success, else a one-line reason in err */
  opf_gpu_launch_fn supports; /* may be NULL: everything run() accepts */
} opf_gpu_launcher;

typedef const opf_gpu_launcher* (*opf_gpu_launcher_table_fn)(void);

#ifdef __cplusplus
}

#include <string>

namespace opf::gpu {

// The generic kernel argument struct from a call: ptr[i] = argument i, rows/cols/shape from
// argument 0, params as doubles. Tensors must be contiguous, except argument i when bit i of
// `views` is set (the manifest's `view` arguments). Argument i is a list when bit i of `lists` is
// set: it is skipped here (ptr NULL; the caller builds the list table, and rows/cols are its), and
// every other argument must be one tensor. "" on success, else the problem.
inline std::string args_from_call(const opf_call* c, opf_gpu_args& a, unsigned views = 0, unsigned lists = 0) {
  a = opf_gpu_args{};
  if (c->nargs < 1 || c->nargs > OPF_GPU_MAX_ARGS || !c->args)
    return "GPU modules take 1.." + std::to_string(OPF_GPU_MAX_ARGS) + " arguments, got " + std::to_string(c->nargs);
  if (c->nparams < 0 || c->nparams > OPF_GPU_MAX_PARAMS || (c->nparams > 0 && !c->params))
    return "GPU modules take at most " + std::to_string(OPF_GPU_MAX_PARAMS) + " params, got " +
           std::to_string(c->nparams);
  for (int i = 0; i < c->nargs; ++i) {
    const opf_arg& arg = c->args[i];
    if (lists >> i & 1u) continue;
    if (arg.count != 1 || !arg.tensors)
      return "argument " + std::to_string(i) + " must be one tensor (the generic GPU launcher takes no lists), got " +
             std::to_string(arg.count);
    const opf_tensor& t = arg.tensors[0];
    if (t.ndim < 0 || t.ndim > OPF_GPU_MAX_DIMS)
      return "argument " + std::to_string(i) + " has " + std::to_string(t.ndim) + " dims";
    long long expect = 1;
    for (int d = t.ndim - 1; d >= 0 && !(views >> i & 1u); --d) {
      if (t.shape[d] > 1 && t.strides[d] != expect)
        return "argument " + std::to_string(i) + " is not contiguous (stride " + std::to_string(t.strides[d]) +
               " in dim " + std::to_string(d) + ")";
      expect *= t.shape[d];
    }
    a.ptr[i] = t.data;
    a.arg_ndim[i] = t.ndim;
    for (int d = 0; d < t.ndim; ++d) {
      a.arg_shape[i][d] = t.shape[d];
      a.arg_stride[i][d] = t.strides[d];
    }
  }
  for (int i = 0; i < c->nparams; ++i)
    a.param[i] = c->params[i].type == OPF_PARAM_F64 ? c->params[i].f64 : double(c->params[i].i64);
  a.nargs = c->nargs;
  if (lists) return "";
  const opf_tensor& t0 = c->args[0].tensors[0];
  if (t0.ndim < 1) return "first tensor has " + std::to_string(t0.ndim) + " dims";
  a.ndim = t0.ndim;
  a.rows = 1;
  for (int d = 0; d < t0.ndim; ++d) {
    a.shape[d] = t0.shape[d];
    if (d + 1 < t0.ndim) a.rows *= t0.shape[d];
  }
  a.cols = t0.shape[t0.ndim - 1];
  return "";
}

}  // namespace opf::gpu
#endif

#endif /* OPFORGE_GPU_LAUNCHER_H */
