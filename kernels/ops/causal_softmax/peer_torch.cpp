// PyTorch eager (libtorch 1.13, CPU) as a peer of causal_softmax: the causal attention softmax as
// Python models write it without a fused kernel (Megatron's forward_torch_softmax with
// softmax_in_fp32, nanoGPT's masked_fill): x.float() * scale, masked_fill_(triu mask, -inf),
// softmax(-1), .to(T), with the [sq, sk] upper-triangular bool mask built once (a model buffer,
// untimed). -inf rather than Megatron's -10000: a kept score below -10000 (the `large` variant)
// would otherwise hand weight to future keys; with -inf the masked entries come out exactly 0,
// as apex and the op write them. f32 softmax because 1.13 has no f16 softmax on the CPU (and the
// op's math is f32 for every T).
// Backward: autograd's sequence for that graph, given the f32 softmax output autograd saved
// (converted from the op's y outside the timed region): dy.float(), _softmax_backward_data,
// masked_fill(mask, 0) (MaskedFillBackward), * scale, .to(T). The masked_fill changes no value
// (y is 0 there) but eager runs it, so the peer does.
// at::_masked_softmax exists on the CPU in 1.13, but only nn.MultiheadAttention's inference fast
// path calls it; training code (which has a backward) goes through masked_fill + softmax.
#include <ATen/ops/_softmax_backward_data.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/softmax.h>

#include <limits>

#include "peers/torch/torch_peer.h"

namespace opf::suites::peers {
namespace {

using namespace torch_peer;

class Run final : public PeerRun {
 public:
  Run(const PeerCase& c, const DrawnCase& drawn)
      : backward_(c.entry == "backward"), T_(scalar_type(c.dtype)), scale_(c.params.get("scale")), buf_(drawn) {
    use_threads(c.threads);
    mask_ = at::ones({c.shape[1], c.shape[2]}, at::TensorOptions().dtype(at::kBool)).triu(1);
    if (!backward_) {
      x_ = buf_.arg("x");
    } else {
      dy_ = buf_.arg("dy");
      y32_ = buf_.arg("y").to(at::kFloat);
    }
  }

  void run() override {
    y_ = dx_ = at::Tensor();
    if (!backward_) {
      at::Tensor z = x_.to(at::kFloat).mul(scale_);
      z.masked_fill_(mask_, -std::numeric_limits<double>::infinity());
      y_ = at::softmax(z, -1).to(T_);
    } else {
      const at::Tensor g = at::_softmax_backward_data(dy_.to(at::kFloat), y32_, -1, at::kFloat);
      dx_ = g.masked_fill(mask_, 0.0).mul(scale_).to(T_);
    }
  }

  bool output(std::string_view name, std::vector<double>& out) const override {
    const at::Tensor* t = nullptr;
    if (!backward_ && name == "y") t = &y_;
    if (backward_ && name == "dy") t = &dx_;  // the op writes dx into dy
    if (!t) return false;
    to_doubles(*t, out);
    return true;
  }

 private:
  bool backward_;
  at::ScalarType T_;
  double scale_;
  Buffers buf_;
  at::Tensor mask_, x_, dy_, y32_, y_, dx_;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

std::string unsupported(const PeerCase& c) {
  if (c.shape.size() != 3 || c.shape[1] != c.shape[2])
    return "causal_softmax shapes are [attn_batches, sq, sk], sq == sk";
  return probe(c, "causal_softmax", {2, 5, 5}, make);
}

}  // namespace

OPF_PEER_ADAPTER(torch_causal_softmax, "torch", "causal_softmax", unsupported, make);

}  // namespace opf::suites::peers
