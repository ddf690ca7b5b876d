// PyTorch eager (libtorch 1.13, CPU) as a peer of softmax_xentropy: cross_entropy with
// label_smoothing = smoothing, ignore_index = padding_idx, reduction none, on logits.float()
// (as apex's xentropy and Megatron's torch path compute in f32; this also gives f16, which has no
// CPU log_softmax in 1.13). Losses are f32, like ours; torch has no max_log_sum_exp output.
// Backward is autograd's sequence for that graph given its saved log-probabilities (prepared
// outside the timed region): nll_loss_backward scaled by 1 - s, plus the smoothing term's
// -s/C * grad per row (0 on padding rows), then _log_softmax_backward_data and .to(T).
#include <ATen/ops/_log_softmax_backward_data.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/log_softmax.h>
#include <ATen/ops/nll_loss_backward.h>
#include <ATen/ops/scalar_tensor.h>

#include "peers/torch/torch_peer.h"

namespace opf::suites::peers {
namespace {

using namespace torch_peer;

constexpr int64_t kReductionNone = 0;  // at::Reduction::None

class Run final : public PeerRun {
 public:
  Run(const PeerCase& c, const DrawnCase& drawn)
      : backward_(c.entry == "backward"),
        T_(scalar_type(c.dtype)),
        s_(c.params.get("smoothing")),
        ignore_(c.params.get_int("padding_idx")),
        classes_(c.shape[1]),
        buf_(drawn) {
    use_threads(c.threads);
    labels_ = buf_.arg("labels");
    logits_ = buf_.arg("logits");
    if (backward_) {
      grad_ = buf_.arg("grad_losses");
      logp_ = at::log_softmax(logits_.to(at::kFloat), 1);
      keep_ = labels_.ne(ignore_).to(at::kFloat).unsqueeze(1);
      total_weight_ = at::scalar_tensor(1.0, at::TensorOptions().dtype(at::kFloat));
    }
  }

  void run() override {
    losses_ = dx_ = at::Tensor();
    if (!backward_) {
      losses_ = at::cross_entropy_loss(logits_.to(at::kFloat), labels_, {}, kReductionNone, ignore_, s_);
    } else {
      at::Tensor g =
          at::nll_loss_backward(grad_.mul(1.0 - s_), logp_, labels_, {}, kReductionNone, ignore_, total_weight_);
      if (s_ != 0)
        g.add_(grad_.unsqueeze(1).mul(keep_).mul(-s_ / double(classes_)));  // the smoothing term's, broadcast over C
      dx_ = at::_log_softmax_backward_data(g, logp_, 1, at::kFloat).to(T_);
    }
  }

  bool output(std::string_view name, std::vector<double>& out) const override {
    const at::Tensor* t = nullptr;
    if (!backward_ && name == "losses") t = &losses_;
    if (backward_ && name == "grad_logits") t = &dx_;
    if (!t) return false;
    to_doubles(*t, out);
    return true;
  }

 private:
  bool backward_;
  at::ScalarType T_;
  double s_;
  int64_t ignore_, classes_;
  Buffers buf_;
  at::Tensor labels_, logits_, grad_, logp_, keep_, total_weight_, losses_, dx_;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

std::string unsupported(const PeerCase& c) {
  if (c.shape.size() != 2) return "softmax_xentropy shapes are [N, C]";
  return probe(c, "softmax_xentropy", {3, 8}, make);
}

}  // namespace

OPF_PEER_ADAPTER(torch_softmax_xentropy, "torch", "softmax_xentropy", unsupported, make);

}  // namespace opf::suites::peers
