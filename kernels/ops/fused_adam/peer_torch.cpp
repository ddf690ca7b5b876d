// PyTorch eager (libtorch 1.13, CPU) as a peer of fused_adam: torch.optim.Adam / AdamW with
// foreach=True, the at::_foreach_* calls of 1.13's _multi_tensor_adam / _multi_tensor_adamw
// (not capturable, no amsgrad), in their order:
//   AdamW, weight_decay != 0:  _foreach_mul_(params, 1 - lr*wd)
//   Adam (L2), weight_decay != 0: grads = _foreach_add(grads, params, alpha=wd)
//   _foreach_mul_(exp_avg, beta1); _foreach_add_(exp_avg, grads, alpha=1 - beta1)
//   _foreach_mul_(exp_avg_sq, beta2); _foreach_addcmul_(exp_avg_sq, grads, grads, 1 - beta2)
//   d = _foreach_sqrt(exp_avg_sq); _foreach_div_(d, sqrt(bc2)); d = _foreach_add(d, eps)
//   _foreach_addcdiv_(params, exp_avg, d, -lr/bc1)
// with bc = 1 - beta^step (bias_correction off: 1; 1.13 always corrects, the flag is ours).
// Our states are f32 beside T params and grads, as apex's; the CPU foreach ops run tensor by
// tensor and promote f16/bf16 operands to f32 the same way (params rounded to T once per pass).
// torch has no noop flag in this path: the peer reports params, exp_avg and exp_avg_sq.
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_addcdiv.h>
#include <ATen/ops/_foreach_addcmul.h>
#include <ATen/ops/_foreach_div.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_sqrt.h>

#include <cmath>

#include "peers/torch/torch_peer.h"

namespace opf::suites::peers {
namespace {

using namespace torch_peer;

class Run final : public PeerRun {
 public:
  Run(const PeerCase& c, const DrawnCase& drawn) : params_(c.params), buf_(drawn) {
    use_threads(c.threads);
    const int n = buf_.list_size("grads");
    for (int k = 0; k < n; ++k) {
      g_.push_back(buf_.arg("grads", k));
      p_.push_back(buf_.arg("params", k));
      m_.push_back(buf_.arg("exp_avg", k));
      v_.push_back(buf_.arg("exp_avg_sq", k));
    }
  }

  void run() override {
    const double lr = params_.get("lr"), beta1 = params_.get("beta1"), beta2 = params_.get("beta2"),
                 eps = params_.get("eps"), wd = params_.get("weight_decay"), t = double(params_.get_int("step"));
    const bool adam_w = params_.flag("adam_w_mode"), bc = params_.flag("bias_correction");
    std::vector<at::Tensor> grads = g_;
    if (wd != 0) {
      if (adam_w) at::_foreach_mul_(p_, 1 - lr * wd);
      else grads = at::_foreach_add(g_, p_, wd);
    }
    at::_foreach_mul_(m_, beta1);
    at::_foreach_add_(m_, grads, 1 - beta1);
    at::_foreach_mul_(v_, beta2);
    at::_foreach_addcmul_(v_, grads, grads, 1 - beta2);
    const double bc1 = bc ? 1 - std::pow(beta1, t) : 1.0, bc2 = bc ? 1 - std::pow(beta2, t) : 1.0;
    const std::vector<at::Scalar> bc2_sqrt(p_.size(), std::sqrt(bc2)), step_size(p_.size(), -lr / bc1);
    std::vector<at::Tensor> d = at::_foreach_sqrt(v_);
    at::_foreach_div_(d, bc2_sqrt);
    d = at::_foreach_add(d, eps);
    at::_foreach_addcdiv_(p_, m_, d, step_size);
  }

  bool output(std::string_view, std::vector<double>&) const override { return false; }  // no noop flag

  bool output(std::string_view name, int k, std::vector<double>& out) const override {
    if (k < 0 || size_t(k) >= p_.size()) return false;
    if (name == "params") to_doubles(p_[size_t(k)], out);
    else if (name == "exp_avg") to_doubles(m_[size_t(k)], out);
    else if (name == "exp_avg_sq") to_doubles(v_[size_t(k)], out);
    else return false;
    return true;
  }

 private:
  Params params_;
  Buffers buf_;
  std::vector<at::Tensor> g_, p_, m_, v_;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

std::string unsupported(const PeerCase& c) {
  if (c.shape.size() != 2) return "fused_adam shapes are [list_length, max_numel]";
  if (c.entry != "step") return "fused_adam has one entry, step";
  return probe(c, "fused_adam", {3, 100}, make);
}

}  // namespace

OPF_PEER_ADAPTER(torch_fused_adam, "torch", "fused_adam", unsupported, make);

}  // namespace opf::suites::peers
