/* opforge GPU kernel argument and launch convention — shared by kernel.cu files (nvcc, NVRTC,
 * hipcc, hiprtc) and the host launchers (core/cuda_backend.cpp, core/hip_backend.cpp).
 *
 * Why one convention: the host launcher is generic. It knows no op; it launches kernels by name
 * with a grid computed from a plan that the module itself carries, so adding an op needs no host
 * code (docs/design.md, principle 1) and tuning constants stay inside the kernel text (principle 6).
 *
 * Kernels. Every kernel takes exactly one argument, `opf_gpu_args` by value:
 *     extern "C" __global__ void <op>_<entry>_<dtype>(opf_gpu_args a);      stage 0
 *     extern "C" __global__ void <op>_<entry>_<dtype>_s<k>(opf_gpu_args a); stage k = 1, 2, ...
 *   <dtype> is the storage dtype of the call's first tensor ("f32", "f16", "bf16").
 *
 * Plans. For each entry the module defines
 *     extern "C" __constant__ opf_gpu_plan <op>_<entry>_plan;
 *   The launcher reads it once per module (cuModuleGetGlobal / hipModuleGetGlobal), then launches
 *   stage 0..nstages-1 in order on the call's stream; each stage sees every earlier stage's writes.
 *   Stage k's grid: x = ceil(extent(grid_x_extent) / grid_x_div), y = grid_y, z = 1; block =
 *   (block, 1, 1); dynamic shared memory = shared_bytes. A stage whose grid is empty is skipped.
 *   Workspace: the launcher provides `workspace`, at least workspace_mult * extent(workspace_extent)
 *   bytes of device memory (uninitialised; NULL when that is 0). It is reused between calls of the
 *   same module, so calls of one module must be ordered (one stream, or synchronised).
 *
 * Arguments. ptr[i] = the call's argument i in manifest order (kernels/manifest.toml), rows/cols come from
 * tensor 0: cols = its last dimension, rows = the product of the others; shape/ndim are its full
 * shape; arg_shape[i]/arg_ndim[i] are argument i's (an entry whose first tensor does not carry
 * every size, e.g. a backward that starts with a per-row gradient); param[] = manifest `params` in
 * manifest order (i64, bool and enum params as doubles); arg_stride[i] = argument i's strides in
 * elements. Tensors are dense and contiguous, except arguments the manifest marks `view`, which may
 * have any strides (a kernel indexes those through arg_stride).
 *
 * Lists (multi-tensor apply). In an entry with `list` arguments (optimizers, multi_tensor) every
 * list holds the same number of tensors and tensor k has the same element count in every list
 * (dense; dtypes by the manifest's rules). The launcher cuts each tensor into chunks of
 * plan.chunk elements (its last chunk shorter; an empty tensor has none), numbers the chunks of
 * all tensors in list order, and uploads a table to device memory before the first stage:
 * a.lists points to it (NULL in entries without lists), a.ptr[i] of a list argument is NULL, and
 * rows = number of tensors, cols = number of chunks; the extents TENSORS and CHUNKS size grids and
 * workspaces by them. Arguments other than lists (noop_flag, norms) are as above.
 * Device-side accessors: gpu/multi_tensor.cuh.
 *
 * Plain C, no includes, fixed-width-free types: NVRTC and hiprtc compile this without host headers;
 * `long long`, `double` and pointers have the same size and alignment on the host (LP64) and on
 * both device ABIs, so the struct's layout is identical on both sides.
 */
#ifndef OPFORGE_GPU_LAUNCH_ABI_H
#define OPFORGE_GPU_LAUNCH_ABI_H

#define OPF_GPU_MAX_ARGS 12
#define OPF_GPU_MAX_DIMS 6 /* = OPF_MAX_DIMS (abi.h) */
#define OPF_GPU_MAX_PARAMS 16
#define OPF_GPU_MAX_STAGES 6
#define OPF_GPU_MAX_LISTS 6

/* What a grid or workspace size scales with. */
#define OPF_EXTENT_ONE 0
#define OPF_EXTENT_ROWS 1
#define OPF_EXTENT_COLS 2
#define OPF_EXTENT_TENSORS 3 /* list entries: tensors per list */
#define OPF_EXTENT_CHUNKS 4  /* list entries: chunks of all the lists' tensors */

/* A list entry's tensor k: its data in every list (lists in argument order) and size. */
typedef struct opf_gpu_list_tensor {
  void* ptr[OPF_GPU_MAX_LISTS];
  long long numel;
  long long first_chunk; /* the index of its first chunk */
} opf_gpu_list_tensor;

/* The table of a list entry's call, in device memory. Chunk c is elements
 * [(c - tensor[k].first_chunk) * chunk, ...) of tensor k = chunk_tensor[c]. */
typedef struct opf_gpu_lists {
  long long ntensors;
  long long nchunks;
  long long chunk;
  int nlists;
  int list_arg[OPF_GPU_MAX_LISTS];   /* list j is argument list_arg[j] */
  int dtype[OPF_GPU_MAX_LISTS];      /* the dtype of list j's tensors: opf_dtype codes (opforge/abi.h) */
  const opf_gpu_list_tensor* tensor; /* [ntensors] */
  const int* chunk_tensor;           /* [nchunks] */
} opf_gpu_lists;

typedef struct opf_gpu_args {
  void* ptr[OPF_GPU_MAX_ARGS];
  void* workspace;
  long long rows;
  long long cols;
  long long shape[OPF_GPU_MAX_DIMS];
  double param[OPF_GPU_MAX_PARAMS];
  int ndim;
  int nargs;
  long long arg_shape[OPF_GPU_MAX_ARGS][OPF_GPU_MAX_DIMS];
  long long arg_stride[OPF_GPU_MAX_ARGS][OPF_GPU_MAX_DIMS];
  int arg_ndim[OPF_GPU_MAX_ARGS];
  const opf_gpu_lists* lists; /* list entries only, else NULL */
} opf_gpu_args;

typedef struct opf_gpu_stage {
  int grid_x_extent; /* OPF_EXTENT_* */
  int grid_x_div;    /* >= 1 */
  int grid_y;        /* >= 1 */
  int block;         /* threads per block */
  int shared_bytes;  /* dynamic shared memory per block */
} opf_gpu_stage;

typedef struct opf_gpu_plan {
  int nstages;          /* 1..OPF_GPU_MAX_STAGES */
  int workspace_extent; /* OPF_EXTENT_* */
  int workspace_mult;   /* workspace bytes = workspace_mult * extent */
  opf_gpu_stage stage[OPF_GPU_MAX_STAGES];
  int chunk; /* list entries: elements per chunk (>= 1); else unused */
} opf_gpu_plan;

#endif /* OPFORGE_GPU_LAUNCH_ABI_H */
