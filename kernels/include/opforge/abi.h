/* opforge module ABI, version 2 — the contract between the loader and every op module.
 *
 * A module is what one op x backend compiles to: a shared object for the CPU, a fatbin/cubin for
 * CUDA, a code object for HIP. Prebuilt (Meson) and JIT (loader) modules are the same artefact;
 * only who runs the compiler, and when, differs.
 *
 * CPU modules export one symbol, `opf_module`, returning a static table. The loader refuses a
 * module whose abi_version, op or backend differ from what it asked for (a v1 module found in a
 * cache or module dir is refused with one line naming its path and version).
 *
 * A call names an entry of the op ("forward", "step", "l2norm", ...). Its arguments and params
 * come in the order the op's manifest entry lists them (kernels/manifest.toml; `opforge op OP
 * --describe` prints it). Every argument is an opf_arg: one tensor, or a list of tensors
 * (count may be 0) for the manifest's `list` arguments. Tensors carry strides in elements; a
 * module accepts non-contiguous strides only for arguments the manifest marks `view`.
 * Params are typed (f64, i64, bool, enum = index into the manifest's choices).
 *
 * Threads: CPU modules split their work into tasks whose boundaries depend only on the problem
 * (never on the thread count) and run them through call->host->parallel_for, so results are
 * bitwise identical for any number of threads. host == NULL runs every task on the caller's thread.
 */
#ifndef OPFORGE_ABI_H
#define OPFORGE_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OPF_ABI_VERSION 2u
#define OPF_MAX_DIMS 6

typedef enum opf_dtype {
  OPF_F32 = 0,
  OPF_F16 = 1,
  OPF_BF16 = 2,
  OPF_F64 = 3,
  OPF_U8 = 4,
  OPF_I64 = 5,
  OPF_I32 = 6,
} opf_dtype;
#define OPF_DTYPE_COUNT 7

typedef struct opf_tensor {
  void* data;    /* host pointer (cpu) or device pointer (cuda/hip) */
  int32_t dtype; /* opf_dtype */
  int32_t ndim;
  int64_t shape[OPF_MAX_DIMS];
  int64_t strides[OPF_MAX_DIMS]; /* in elements; row-major contiguous: strides[ndim-1] = 1, ... */
} opf_tensor;

typedef struct opf_arg {
  int32_t count;             /* 1 for a tensor argument; the list's length for a list argument */
  const opf_tensor* tensors; /* count tensors */
} opf_arg;

typedef enum opf_param_type {
  OPF_PARAM_F64 = 0,
  OPF_PARAM_I64 = 1,
  OPF_PARAM_BOOL = 2, /* i64: 0 or 1 */
  OPF_PARAM_ENUM = 3, /* i64: index into the manifest's choices */
} opf_param_type;

typedef struct opf_param {
  const char* name; /* manifest name, e.g. "eps" */
  int32_t type;     /* opf_param_type */
  int32_t reserved;
  double f64;  /* OPF_PARAM_F64 */
  int64_t i64; /* OPF_PARAM_I64, _BOOL, _ENUM */
} opf_param;

/* The caller's thread pool, shared by every op. parallel_for runs task(ctx, i) once for every i
 * in [0, ntasks) on up to num_threads threads and returns when all are done. */
typedef void (*opf_task_fn)(void* ctx, int64_t task);
typedef struct opf_host {
  int32_t num_threads;
  void (*parallel_for)(const struct opf_host* self, int64_t ntasks, opf_task_fn task, void* ctx);
  void* impl;
} opf_host;

typedef struct opf_call {
  const char* entry;   /* a manifest entry name */
  const opf_arg* args; /* in the entry's manifest order */
  int32_t nargs;
  const opf_param* params; /* the op's manifest params, in manifest order */
  int32_t nparams;
  void* stream;         /* backend stream, or NULL for the default one */
  const opf_host* host; /* CPU thread pool, or NULL: run on the calling thread */
} opf_call;

struct opf_module_info;

/* Return 0 on success; otherwise write a one-line reason into err. */
typedef int (*opf_run_fn)(const struct opf_module_info* self, const opf_call* call, char* err, size_t err_len);

typedef struct opf_module_info {
  uint32_t abi_version; /* OPF_ABI_VERSION */
  const char* op;       /* manifest key, e.g. "layer_norm" */
  const char* backend;  /* "cpu" | "cuda" | "hip" */
  const char* isa;      /* what the module runs as here, e.g. "AVX3", "sm_90" (informational) */
  opf_run_fn run;
  /* ggml's supports_op: 0 when this module computes the call (arguments well-formed and the
   * combination implemented); otherwise 1 and a one-line reason. May be NULL (supports all).
   * A call run() would reject as malformed is also unsupported here, with the same reason. */
  opf_run_fn supports;
  void* impl; /* backend-private (GPU: the loaded code object; CPU JIT: a pair's kernels, cpu/dispatch.h) */
} opf_module_info;

typedef const opf_module_info* (*opf_module_fn)(void);

#if defined(_WIN32)
#define OPF_EXPORT __declspec(dllexport)
#else
#define OPF_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
}
#endif

#endif /* OPFORGE_ABI_H */
