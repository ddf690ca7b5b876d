// fused_dense's `cublaslt` peer (CUDA, benchmarks only): each entry's cuBLASLt GEMMs with none of
// the epilogues — what the fusion is measured against (issue floor: fused_dense within 1.1x the
// time of cuBLASLt's GEMMs alone). The same GEMMs as launch.cpp's cuBLASLt path (cublaslt.h's
// mapping, CUBLAS_COMPUTE_32F) on the case's own inputs in device memory, in every dtype (16-bit
// linear_gelu_linear keeps dH in the storage dtype here). It leaves out the bias, GELU and bias
// gradients, so it does not compute the op: timed only, never cross-checked.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "opforge/error.h"
#include "opforge/loader.h"
#include "ops/fused_dense/cublaslt.h"
#include "peers/peer.h"

namespace opf::suites::peers::dense_cublaslt {
namespace {

constexpr size_t kLtWorkspace = size_t(32) << 20;  // as launch.cpp gives cuBLASLt

std::string unsupported(const PeerCase&) {
  const Availability av = Loader::instance().availability("cuda");
  return av.ok ? "" : "no CUDA device: " + av.reason;
}

// Device buffers freed with the object (also when a constructor throws after allocating some).
class Buffers {
 public:
  explicit Buffers(Device& dev) : dev_(dev) {}
  ~Buffers() {
    for (void* p : held_) dev_.free(p);
  }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
  void* alloc(size_t bytes) { return held_.emplace_back(dev_.alloc(bytes)); }

 private:
  Device& dev_;
  std::vector<void*> held_;
};

class Run final : public PeerRun {
 public:
  Run(const PeerCase& c, const DrawnCase& drawn) : dev_(Loader::instance().device("cuda")), buffers_(dev_) {
    opf_gpu_args a{};
    if (drawn.host.size() > size_t(OPF_GPU_MAX_ARGS)) throw Error("cublaslt peer: too many arguments");
    for (size_t i = 0; i < drawn.host.size(); ++i) {  // ABI order: the manifest's argument order
      const HostArg& h = drawn.host[i];
      if (h.desc->shape.size() > size_t(OPF_GPU_MAX_DIMS))
        throw Error("cublaslt peer: " + h.desc->name + " has too many dims");
      void* p = buffers_.alloc(h.bytes.size());
      dev_.to_device(p, h.bytes.data(), h.bytes.size());
      a.ptr[i] = p;
      a.arg_ndim[i] = int(h.desc->shape.size());
      for (size_t d = 0; d < h.desc->shape.size(); ++d) a.arg_shape[i][d] = h.desc->shape[d];
    }
    a.nargs = int(drawn.host.size());
    const auto& shape = c.shape;  // [batch, in, hidden, out]
    void* dh = buffers_.alloc(size_t(shape[0] * shape[2]) * sizeof(float));
    void* ws = buffers_.alloc(kLtWorkspace);
    const fused_dense_lt::Library& lib = fused_dense_lt::library();  // after alloc: the context is bound
    if (!lib.error.empty()) throw Error("cublaslt peer: " + lib.error);
    std::vector<fused_dense_lt::Gemm> g;
    if (std::string why = fused_dense_lt::gemms(std::string(c.entry), c.dtype, a, dh, g, false); !why.empty())
      throw Error("cublaslt peer: " + why);
    for (size_t i = 0; i < g.size(); ++i) {
      plans_.push_back(std::make_unique<fused_dense_lt::Plan>(lib, g[i], ws, kLtWorkspace));
      if (std::string why = plans_.back()->prepare(); !why.empty())
        throw Error("cublaslt peer: GEMM " + std::to_string(i) + ": " + why);
    }
  }
  void enqueue() override {
    for (const auto& p : plans_)
      if (std::string why = p->run(nullptr); !why.empty()) throw Error("cublaslt peer: " + why);
  }
  void run() override {
    enqueue();
    dev_.synchronize();
  }
  bool output(std::string_view, std::vector<double>&) const override { return false; }

 private:
  Device& dev_;
  Buffers buffers_;
  std::vector<std::unique_ptr<fused_dense_lt::Plan>> plans_;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

}  // namespace

OPF_PEER_ADAPTER(cublaslt_fused_dense, "cublaslt", "fused_dense", unsupported, make, "cuda",
                 "cuBLASLt's GEMMs without the epilogues: the time the fusion is measured against, not the op");

}  // namespace opf::suites::peers::dense_cublaslt
