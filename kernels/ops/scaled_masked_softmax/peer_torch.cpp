// PyTorch eager (libtorch 1.13, CPU) as a peer of scaled_masked_softmax: Megatron's torch path
// (FusedScaleMaskSoftmax.forward_torch_softmax, softmax in f32): x.float() * scale,
// masked_fill_(mask, -10000), softmax(-1), .to(T). Our op zeroes fully masked rows where that
// path leaves a uniform 1/sk row, so the peer adds one masked_fill_ of such rows (mask.all(-1))
// to compute the op we benchmark. Backward is autograd's sequence for that graph given its saved
// f32 softmax output (prepared outside the timed region): dy.float(),
// _softmax_backward_data, * scale, .to(T). The op's backward takes no mask (masked entries have
// y = 0, so masked_fill's backward changes nothing there).
#include <ATen/ops/_softmax_backward_data.h>
#include <ATen/ops/softmax.h>

#include "peers/torch/torch_peer.h"

namespace opf::suites::peers {
namespace {

using namespace torch_peer;

class Run final : public PeerRun {
 public:
  Run(const PeerCase& c, const DrawnCase& drawn)
      : backward_(c.entry == "backward"), T_(scalar_type(c.dtype)), scale_(c.params.get("scale")), buf_(drawn) {
    use_threads(c.threads);
    if (!backward_) {
      x_ = buf_.arg("x");
      mask_ = buf_.arg("mask", -1, {}, at::kBool);  // our u8 mask holds 0 / 1
      empty_rows_ = mask_.all(-1, true);
    } else {
      dy_ = buf_.arg("dy");
      y32_ = buf_.arg("y").to(at::kFloat);
    }
  }

  void run() override {
    y_ = dx_ = at::Tensor();
    if (!backward_) {
      at::Tensor z = x_.to(at::kFloat).mul(scale_);
      z.masked_fill_(mask_, -10000.0);
      at::Tensor p = at::softmax(z, -1);
      p.masked_fill_(empty_rows_, 0.0);
      y_ = p.to(T_);
    } else {
      dx_ = at::_softmax_backward_data(dy_.to(at::kFloat), y32_, -1, at::kFloat).mul(scale_).to(T_);
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
  at::Tensor x_, mask_, empty_rows_, dy_, y32_, y_, dx_;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

std::string unsupported(const PeerCase& c) {
  if (c.shape.size() != 4) return "scaled_masked_softmax shapes are [b, np, sq, sk]";
  return probe(c, "scaled_masked_softmax", {1, 2, 3, 8}, make);
}

}  // namespace

OPF_PEER_ADAPTER(torch_scaled_masked_softmax, "torch", "scaled_masked_softmax", unsupported, make);

}  // namespace opf::suites::peers
