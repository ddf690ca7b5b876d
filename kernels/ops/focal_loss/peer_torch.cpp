// PyTorch eager (libtorch 1.13, CPU) as a peer of focal_loss's forward: torchvision's
// sigmoid_focal_loss on x = logits[:, :K].float() with one-hot targets from the labels (smoothed
// t (1-s) + s/2), ignored rows masked, summed and divided by num_positives_sum; then the gradient
// autograd computes for that graph, op by op as its backward functions do (ATen has no autograd
// here: the peers call the functional ops), written into a zero [N, Cpad] tensor of T (the slice's
// backward). apex's forward returns that unnormalized gradient with the loss, so the forward
// entry is compared; backward (a scalar scale of a saved gradient) has no eager counterpart.
#include <ATen/ops/binary_cross_entropy_with_logits.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/rsub.h>
#include <ATen/ops/scatter.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/sigmoid_backward.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>

#include "peers/torch/torch_peer.h"

namespace opf::suites::peers {
namespace {

using namespace torch_peer;

constexpr int64_t kReductionNone = 0;  // at::Reduction::None

class Run final : public PeerRun {
 public:
  Run(const PeerCase& c, const DrawnCase& drawn)
      : T_(scalar_type(c.dtype)),
        real_(c.params.get_int("num_real_classes")),
        alpha_(c.params.get("alpha")),
        gamma_(c.params.get("gamma")),
        s_(c.params.get("label_smoothing")),
        buf_(drawn) {
    use_threads(c.threads);
    logits_ = buf_.arg("logits");
    labels_ = buf_.arg("labels");
    num_pos_ = buf_.arg("num_positives_sum");
  }

  void run() override {
    const at::Tensor x = logits_.slice(1, 0, real_).to(at::kFloat);
    at::Tensor t =
        at::zeros_like(x).scatter_(1, labels_.clamp_min(0).unsqueeze(1), labels_.ge(0).unsqueeze(1).to(at::kFloat));
    if (s_ != 0) t = t.mul(1 - s_).add(s_ / 2);
    const at::Tensor valid = labels_.ne(-2).unsqueeze(1).to(at::kFloat);
    const at::Tensor p = at::sigmoid(x);
    const at::Tensor ce = at::binary_cross_entropy_with_logits(x, t, {}, {}, kReductionNone);
    const at::Tensor p_t = p.mul(t).add(at::rsub(p, 1).mul(at::rsub(t, 1)));
    const at::Tensor base = at::rsub(p_t, 1);
    const at::Tensor mod = base.pow(gamma_);
    const at::Tensor a_t = t.mul(alpha_).add(at::rsub(t, 1).mul(1 - alpha_));
    loss_ = a_t.mul(ce.mul(mod)).mul(valid).sum().div(num_pos_);
    // backward of sum(a_t * (ce * mod) * valid) w.r.t. x, unnormalized
    const at::Tensor gl = a_t.mul(valid);
    const at::Tensor gce = gl.mul(mod), gmod = gl.mul(ce);
    // pow_backward: exponent 0 gives zeros (no 0 * inf at base 0)
    const at::Tensor gpt = gamma_ == 0 ? at::zeros_like(gmod) : gmod.mul(base.pow(gamma_ - 1).mul(-gamma_));
    const at::Tensor gp = gpt.mul(t.mul(2).sub(1));
    const at::Tensor gx = at::sigmoid_backward(gp, p).add(gce.mul(p.sub(t)));  // + bce_with_logits' backward
    grad_ = at::zeros(logits_.sizes(), at::TensorOptions().dtype(T_));
    grad_.slice(1, 0, real_).copy_(gx);
  }

  bool output(std::string_view name, std::vector<double>& out) const override {
    if (name == "loss") {
      to_doubles(loss_.reshape({1}), out);
      return true;
    }
    if (name == "partial_grad") {
      to_doubles(grad_, out);
      return true;
    }
    return false;
  }

 private:
  at::ScalarType T_;
  int64_t real_;
  double alpha_, gamma_, s_;
  Buffers buf_;
  at::Tensor logits_, labels_, num_pos_, loss_, grad_;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

std::string unsupported(const PeerCase& c) {
  if (c.entry != "forward")
    return "eager has no backward of its own to match: its gradient is part of this peer's forward";
  if (c.shape.size() != 2) return "focal_loss shapes are [N, Cpad]";
  const int64_t k = c.params.get_int("num_real_classes");
  if (k < 1 || k > c.shape[1]) return "num_real_classes outside [1, Cpad]";
  return probe(c, "focal_loss", {3, std::max<int64_t>(k + 15 - (k + 15) % 16, 16)}, make);
}

}  // namespace

OPF_PEER_ADAPTER(torch_focal_loss, "torch", "focal_loss", unsupported, make);

}  // namespace opf::suites::peers
