// PyTorch eager (libtorch 1.13, CPU) as a peer of bias_swiglu: Megatron's unfused bias_swiglu
// (what it runs without the fused kernel), in T as eager runs it:
//   t = x + bias; a, c = t.chunk(2, -1); y = F.silu(a) * c
// Backward: autograd's sequence for that graph, from what the forward saved (t's halves and
// silu(a), computed at setup, untimed):
//   MulBackward:   ds = dy * c;  dc = dy * silu(a)
//   SiluBackward:  da = silu_backward(ds, a)
//   SplitBackward: dx = cat([da, dc], -1)
//   AddBackward:   dbias = dx.sum(0) (sum_to_size of the broadcast bias)
// Every eager op rounds its result to T; the op computes in f32 and rounds once. Where those extra
// roundings leave the op's tolerance the case is not run: bf16 (see unsupported()); f16 has no
// silu on the CPU in 1.13, which the probe reports.
#include <ATen/ops/cat.h>
#include <ATen/ops/silu.h>
#include <ATen/ops/silu_backward.h>
#include <ATen/ops/sum.h>

#include "peers/torch/torch_peer.h"

namespace opf::suites::peers {
namespace {

using namespace torch_peer;

class Run final : public PeerRun {
 public:
  Run(const PeerCase& c, const DrawnCase& drawn) : backward_(c.entry == "backward"), buf_(drawn) {
    use_threads(c.threads);
    x_ = buf_.arg("x");
    bias_ = buf_.arg("bias");
    if (backward_) {
      dy_ = buf_.arg("dy");
      const std::vector<at::Tensor> ac = x_.add(bias_).chunk(2, -1);
      a_ = ac[0];
      c_ = ac[1];
      s_ = at::silu(a_);
    }
  }

  void run() override {
    y_ = dx_ = dbias_ = at::Tensor();
    if (!backward_) {
      const std::vector<at::Tensor> ac = x_.add(bias_).chunk(2, -1);
      y_ = at::silu(ac[0]).mul(ac[1]);
    } else {
      const at::Tensor ds = dy_.mul(c_), dc = dy_.mul(s_);
      dx_ = at::cat({at::silu_backward(ds, a_), dc}, -1);
      dbias_ = dx_.sum(0);
    }
  }

  bool output(std::string_view name, std::vector<double>& out) const override {
    const at::Tensor* t = nullptr;
    if (!backward_ && name == "y") t = &y_;
    if (backward_ && name == "dx") t = &dx_;
    if (backward_ && name == "dbias") t = &dbias_;
    if (!t) return false;
    to_doubles(*t, out);
    return true;
  }

 private:
  bool backward_;
  Buffers buf_;
  at::Tensor x_, bias_, dy_, a_, c_, s_, y_, dx_, dbias_;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

std::string unsupported(const PeerCase& c) {
  if (c.shape.size() != 2) return "bias_swiglu shapes are [N, H] (x is [N, 2H])";
  // measured by the cross-check: y up to 1.1x, dx up to ~60x the op's allowed error
  if (c.dtype == DType::bf16)
    return "eager bf16 rounds every intermediate (x + bias, silu(a), dy * c, ...) to bf16: outside the op's "
           "one-rounding tolerance";
  return probe(c, "bias_swiglu", {3, 5}, make);
}

}  // namespace

OPF_PEER_ADAPTER(torch_bias_swiglu, "torch", "bias_swiglu", unsupported, make);

}  // namespace opf::suites::peers
