// A host launcher (gpu/launcher.h) for layer_norm, used only by the emulation test to prove the
// per-op launcher path: it launches the same kernels the generic plan would (forward: one block
// per row; backward: dx per row, then the two-stage dgamma/dbeta reduction in a workspace), so its
// results must match the generic launcher's bit for bit. It refuses f16 in supports() and run(),
// so the test can see a launcher's reason come through.
#include <cstdio>
#include <string>

#include "gpu/launcher.h"
#include "opforge/dtype.h"

namespace {

constexpr unsigned kBlock = 256, kColTile = 32, kPartials = 16;  // kernel.cu's defaults

int check(const opf_call* call, char* err, size_t len) {
  opf_gpu_args a;
  if (std::string why = opf::gpu::args_from_call(call, a); !why.empty()) {
    std::snprintf(err, len, "test launcher: %s", why.c_str());
    return 1;
  }
  if (call->args[0].tensors[0].dtype == OPF_F16) {
    std::snprintf(err, len, "test launcher: f16 not supported");
    return 1;
  }
  return 0;
}

int launch(const opf_gpu_launch_ctx* ctx, const std::string& name, unsigned gx, unsigned gy, unsigned block,
           const opf_call* call, opf_gpu_args* a, char* err, size_t len) {
  void* fn = nullptr;
  int rc = ctx->kernel(ctx->impl, name.c_str(), &fn);
  if (rc == 0 && gx > 0) rc = ctx->launch(ctx->impl, fn, gx, gy, block, 0, call->stream, a);
  if (rc != 0) {
    char why[200];
    ctx->error(ctx->impl, rc, why, sizeof why);
    std::snprintf(err, len, "test launcher: %s: %s", name.c_str(), why);
  }
  return rc;
}

int run(const opf_gpu_launch_ctx* ctx, const opf_call* call, char* err, size_t len) {
  if (check(call, err, len) != 0) return 1;
  opf_gpu_args a;
  opf::gpu::args_from_call(call, a);
  const std::string base = std::string("layer_norm_") + call->entry + "_" +
                           std::string(opf::dtype_name(opf::DType(call->args[0].tensors[0].dtype)));
  const unsigned rows = unsigned(a.rows), cols = unsigned(a.cols);
  if (std::string(call->entry) == "forward") return launch(ctx, base, rows, 1, kBlock, call, &a, err, len);
  void* ws = nullptr;
  if (int rc = ctx->workspace(ctx->impl, size_t(2) * kPartials * sizeof(float) * cols, &ws); rc != 0) {
    std::snprintf(err, len, "test launcher: workspace failed");
    return 1;
  }
  a.workspace = ws;
  if (launch(ctx, base, rows, 1, kBlock, call, &a, err, len) != 0) return 1;
  if (launch(ctx, base + "_s1", (cols + kColTile - 1) / kColTile, kPartials, kBlock, call, &a, err, len) != 0) return 1;
  return launch(ctx, base + "_s2", (cols + kBlock - 1) / kBlock, 1, kBlock, call, &a, err, len);
}

int supports(const opf_gpu_launch_ctx*, const opf_call* call, char* err, size_t len) { return check(call, err, len); }

}  // namespace

extern "C" __attribute__((visibility("default"))) const opf_gpu_launcher* opf_gpu_launcher_table(void) {
  static const opf_gpu_launcher table{OPF_ABI_VERSION, "layer_norm", run, supports};
  return &table;
}
