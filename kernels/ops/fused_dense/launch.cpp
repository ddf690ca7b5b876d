// fused_dense — host launch code for the CUDA and HIP modules (gpu/launcher.h). The generic plan
// cannot size this op's work: every GEMM's grid is (ceil(M / gpu_tile_m), ceil(N / gpu_tile_n))
// for its own M and N, and the f32 intermediates (a for the second forward GEMM, dH in the
// backward) need a [batch, hidden] f32 workspace. The kernels (kernel.cu) read the call's
// arguments in manifest order and their sizes from arg_shape; this file only picks the grids.
// Calls arrive checked against the manifest (dtypes, symbolic shapes). The opforge GEMM of
// kernel.cu runs on both backends; on CUDA, cuBLASLt takes the calls it computes exactly as the
// contract says (cublaslt.h).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "gpu/launcher.h"
#include "opforge/dtype.h"
#ifdef OPF_LAUNCH_CUDA
#include "ops/fused_dense/cublaslt.h"
#elif defined(OPF_LAUNCH_EMU)
#include "ops/fused_dense/cublaslt_host.h"  // the emulation runs cuBLASLt's GEMMs on the host
#endif

#ifndef OPF_TUNE_GPU_TILE_M
#define OPF_TUNE_GPU_TILE_M 64
#endif
#ifndef OPF_TUNE_GPU_TILE_N
#define OPF_TUNE_GPU_TILE_N 64
#endif

namespace {

constexpr long long kTileM = OPF_TUNE_GPU_TILE_M, kTileN = OPF_TUNE_GPU_TILE_N;
constexpr unsigned kBlock = unsigned(kTileM / 4 * (kTileN / 4));  // kernel.cu's OPF_FD_BLOCK
constexpr long long kMaxGridX = 2147483647LL, kMaxGridY = 65535;

struct Stage {
  int k;           // stage index: kernel <op>_<entry>_<dtype>[_s<k>]
  long long m, n;  // the GEMM's output size
  bool colsum;     // computes a column sum in column tile 0: launch it even when n is 0
};

#if defined(OPF_LAUNCH_CUDA) || defined(OPF_LAUNCH_EMU)
#ifdef OPF_LAUNCH_CUDA
constexpr size_t kLtWorkspace = size_t(32) << 20;  // cuBLASLt's scratch: NVIDIA's advice for Hopper
#else
constexpr size_t kLtWorkspace = 0;
#endif

// The call through cuBLASLt (cublaslt.h). Returns 0 (done), 1 (failed: err says why) or -1 (not
// taken: *why says why; nothing ran).
int run_cublaslt(const opf_gpu_launch_ctx* ctx, const opf_call* call, const opf_gpu_args& a, const std::string& entry,
                 opf::DType dt, std::string* why, char* err, size_t len) {
  using fused_dense_lt::Gemm;
#ifdef OPF_LAUNCH_CUDA
  const fused_dense_lt::Library& lib = fused_dense_lt::library();
  if (!lib.error.empty()) return *why = lib.error, -1;
#endif
  std::vector<Gemm> g;
  if (std::string w = fused_dense_lt::gemms(entry, dt, a, nullptr, g); !w.empty()) return *why = w, -1;
  const int64_t dh_floats =
      entry == "linear_gelu_linear_backward" ? int64_t(a.arg_shape[1][0]) * int64_t(a.arg_shape[2][1]) : 0;
  const size_t lt_offset = (size_t(dh_floats) * sizeof(float) + 255) / 256 * 256;
  void* ws = nullptr;
  if (int rc = ctx->workspace(ctx->impl, lt_offset + kLtWorkspace, &ws); rc != 0) {
    char e[200];
    ctx->error(ctx->impl, rc, e, sizeof e);
    std::snprintf(err, len, "fused_dense: workspace of %zu bytes: %s", lt_offset + kLtWorkspace, e);
    return 1;
  }
  fused_dense_lt::gemms(entry, dt, a, ws, g);  // again, with dH [batch, hidden] f32 at the workspace's head
#ifdef OPF_LAUNCH_EMU
  for (const Gemm& x : g) fused_dense_lt::emulate(x);
  (void)call, (void)len;
  return 0;
#else
  std::vector<std::unique_ptr<fused_dense_lt::Plan> > plans;
  for (size_t i = 0; i < g.size(); ++i) {
    plans.push_back(
        std::make_unique<fused_dense_lt::Plan>(lib, g[i], static_cast<char*>(ws) + lt_offset, kLtWorkspace));
    if (std::string w = plans.back()->prepare(); !w.empty()) return *why = "GEMM " + std::to_string(i) + ": " + w, -1;
  }
  for (size_t i = 0; i < plans.size(); ++i)
    if (std::string w = plans[i]->run(call->stream); !w.empty()) {
      std::snprintf(err, len, "fused_dense %s: GEMM %zu: %s", entry.c_str(), i, w.c_str());
      return 1;
    }
  return 0;
#endif
}
#endif

int run(const opf_gpu_launch_ctx* ctx, const opf_call* call, char* err, size_t len) {
  opf_gpu_args a;
  if (std::string why = opf::gpu::args_from_call(call, a); !why.empty()) {
    std::snprintf(err, len, "fused_dense: %s", why.c_str());
    return 1;
  }
  const std::string entry = call->entry ? call->entry : "";
  const auto dt = opf::DType(call->args[0].tensors[0].dtype);
#if defined(OPF_LAUNCH_CUDA) || defined(OPF_LAUNCH_EMU)
  std::string bad;
  if (const auto pick = fused_dense_lt::choice(&bad); !bad.empty()) {
    std::snprintf(err, len, "fused_dense: %s", bad.c_str());
    return 1;
  } else if (pick != fused_dense_lt::Choice::opforge) {
    std::string why;
    if (const int rc = run_cublaslt(ctx, call, a, entry, dt, &why, err, len); rc >= 0) return rc;
    if (pick == fused_dense_lt::Choice::cublaslt) {
      std::snprintf(err, len,
                    "fused_dense %s: cuBLASLt does not take this call (OPFORGE_FUSED_DENSE_GEMM=cublaslt): %s",
                    entry.c_str(), why.c_str());
      return 1;
    }
  }
#endif
  const std::string base = "fused_dense_" + entry + "_" + std::string(opf::dtype_name(dt));
  Stage st[4];
  int n = 0;
  long long ws_floats = 0;
  auto dim = [&](int arg, int d) { return a.arg_shape[arg][d]; };
  if (entry == "linear_bias_forward") {  // x [b, in], weight [hid, in]
    st[n++] = {0, dim(0, 0), dim(1, 0), false};
  } else if (entry == "linear_bias_backward") {  // dy [b, hid], x [b, in]
    const long long b = dim(1, 0), in = dim(1, 1), hid = dim(0, 1);
    st[n++] = {0, b, in, false};
    st[n++] = {1, hid, in, true};
  } else if (entry == "linear_gelu_linear_forward") {  // x [b, in], weight1 [hid, in], weight2 [out, hid]
    const long long b = dim(0, 0), hid = dim(1, 0), out = dim(3, 0);
    st[n++] = {0, b, hid, false};
    st[n++] = {1, b, out, false};
    ws_floats = b * hid;
  } else if (entry == "linear_gelu_linear_backward") {  // dy [b, out], x [b, in], h [b, hid]
    const long long b = dim(1, 0), in = dim(1, 1), hid = dim(2, 1), out = dim(0, 1);
    st[n++] = {0, out, hid, true};
    st[n++] = {1, b, hid, false};
    st[n++] = {2, hid, in, true};
    st[n++] = {3, b, in, false};
    ws_floats = b * hid;
  } else {
    std::snprintf(err, len, "fused_dense: no entry '%s'", entry.c_str());
    return 1;
  }
  a.workspace = nullptr;
  if (ws_floats > 0) {
    if (int rc = ctx->workspace(ctx->impl, size_t(ws_floats) * sizeof(float), &a.workspace); rc != 0) {
      char why[200];
      ctx->error(ctx->impl, rc, why, sizeof why);
      std::snprintf(err, len, "fused_dense: workspace of %lld bytes: %s", ws_floats * 4, why);
      return 1;
    }
  }
  for (int i = 0; i < n; ++i) {
    const long long gx = (st[i].m + kTileM - 1) / kTileM;
    long long gy = (st[i].n + kTileN - 1) / kTileN;
    if (st[i].colsum && gy == 0) gy = 1;
    if (gx == 0 || gy == 0) continue;
    if (gx > kMaxGridX || gy > kMaxGridY) {
      std::snprintf(err, len, "fused_dense %s: a %lld x %lld GEMM output is beyond the grid limits", entry.c_str(),
                    st[i].m, st[i].n);
      return 1;
    }
    const std::string name = st[i].k ? base + "_s" + std::to_string(st[i].k) : base;
    void* fn = nullptr;
    int rc = ctx->kernel(ctx->impl, name.c_str(), &fn);
    if (rc == 0) rc = ctx->launch(ctx->impl, fn, unsigned(gx), unsigned(gy), kBlock, 0, call->stream, &a);
    if (rc != 0) {
      char why[200];
      ctx->error(ctx->impl, rc, why, sizeof why);
      std::snprintf(err, len, "fused_dense: %s: %s", name.c_str(), why);
      return 1;
    }
  }
  return 0;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const opf_gpu_launcher* opf_gpu_launcher_table(void) {
  static const opf_gpu_launcher table{OPF_ABI_VERSION, "fused_dense", run, nullptr};
  return &table;
}
