/* opforge module ABI — the contract between the loader and every op module.
 *
 * A module is what one op x backend compiles to: a shared object for the CPU, a fatbin/cubin for
 * CUDA, a code object for HIP. Prebuilt (Meson) and JIT (loader) modules are the same artefact;
 * only who runs the compiler, and when, differs.
 *
 * CPU modules export one symbol, `opf_module`, returning a static table. The loader refuses a
 * module whose abi_version, op or backend differ from what it asked for.
 * Tensors are dense, row-major, contiguous. Argument order per entry is defined by the op's
 * ref.cpp (OpSpec::describe), the one place the suites and every backend agree on.
 */
#ifndef OPFORGE_ABI_H
#define OPFORGE_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OPF_ABI_VERSION 1u
#define OPF_MAX_DIMS 6

typedef enum opf_dtype {
  OPF_F32 = 0,
  OPF_F16 = 1,
  OPF_BF16 = 2,
  OPF_F64 = 3,
  OPF_U8 = 4,
  OPF_I64 = 5,
} opf_dtype;

typedef struct opf_tensor {
  void* data;                    /* host pointer (cpu) or device pointer (cuda/hip) */
  int32_t dtype;                 /* opf_dtype */
  int32_t ndim;
  int64_t shape[OPF_MAX_DIMS];
} opf_tensor;

typedef struct opf_call {
  const char* entry;             /* "forward" | "backward" */
  const opf_tensor* args;        /* in OpSpec::describe order */
  int32_t nargs;
  const double* params;          /* manifest `params`, in manifest order */
  int32_t nparams;
  void* stream;                  /* backend stream, or NULL for the default one */
} opf_call;

struct opf_module_info;

/* Return 0 on success; otherwise write a one-line reason into err. */
typedef int (*opf_run_fn)(const struct opf_module_info* self, const opf_call* call, char* err, size_t err_len);

typedef struct opf_module_info {
  uint32_t abi_version;          /* OPF_ABI_VERSION */
  const char* op;                /* manifest key, e.g. "layer_norm" */
  const char* backend;           /* "cpu" | "cuda" | "hip" */
  const char* isa;               /* what the module runs as here, e.g. "AVX3", "sm_90" (informational) */
  opf_run_fn run;
  void* impl;                    /* backend-private (GPU: the loaded code object); NULL for CPU */
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
