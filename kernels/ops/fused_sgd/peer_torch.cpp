// PyTorch eager (libtorch 1.13, CPU) as a peer of fused_sgd's step: torch.optim.SGD with
// foreach=True, the ATen calls of 1.13's _multi_tensor_sgd (no maximize, dense grads), in its order:
//   weight_decay != 0:   grads = _foreach_add(grads, params, alpha=wd)      (a new list in T)
//   momentum != 0, buffers present (not first_run):
//                        _foreach_mul_(bufs, mu); _foreach_add_(bufs, grads, alpha=1 - dampening)
//   momentum != 0, first_run (every buffer None): bufs[i] = clone(grads[i]), tensor by tensor
//   nesterov:            _foreach_add_(grads, bufs, alpha=mu)                (in place, as 1.13 does:
//                                                                            the grads themselves when
//                                                                            no decay made a new list)
//   otherwise:           grads = bufs
//   _foreach_add_(params, grads, alpha=-lr)
// apex's scale (1/loss_scale) has no place in torch's SGD: AMP's GradScaler unscales first, which
// on the CPU of 1.13 (no _amp_foreach_non_finite_check_and_unscale_ kernel) is modelled as
// grads = _foreach_mul(grads, scale), a new list in T as the unfused peer does. Our buffers are f32
// beside T params and grads, as apex's; the CPU foreach ops run tensor by tensor and promote the
// T operands to f32 in the buffer update and the param update (params rounded to T once). torch has
// no noop flag in this path (GradScaler skips step() on the host): the peer reports params and
// momentum_buffer. What torch's SGD cannot express (decay after the momentum update, Nesterov with
// dampening) and what it rounds to T where the op keeps f32 is not run (unsupported() says why):
// f16/bf16 run only the plain momentum step (no scale, decay, Nesterov or first run), where the
// param update reads the f32 buffer.
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/clone.h>

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
      b_.push_back(buf_.arg("momentum_buffer", k));
    }
  }

  void run() override {
    // torch's optimizer takes Python floats: the op's f32 factors are what both compute with
    const double lr = float(params_.get("lr")), mu = float(params_.get("momentum")),
                 wd = float(params_.get("weight_decay")), scale = float(params_.get("scale"));
    const double omd = float(1.0 - params_.get("dampening"));
    first_bufs_.clear();  // a first run's clones go back to the allocator, as the state a run replaces
    std::vector<at::Tensor> grads = g_;
    if (scale != 1.0) grads = at::_foreach_mul(grads, scale);
    if (wd != 0) grads = at::_foreach_add(grads, p_, wd);
    if (mu != 0) {
      const std::vector<at::Tensor>* bufs = &b_;
      if (params_.flag("first_run")) {
        for (const at::Tensor& g : grads) first_bufs_.push_back(at::clone(g));
        bufs = &first_bufs_;
      } else {
        at::_foreach_mul_(b_, mu);
        at::_foreach_add_(b_, grads, omd);
      }
      if (params_.flag("nesterov")) at::_foreach_add_(grads, *bufs, mu);
      else grads = *bufs;
    }
    at::_foreach_add_(p_, grads, -lr);
  }

  bool output(std::string_view, std::vector<double>&) const override { return false; }  // no noop flag

  bool output(std::string_view name, int k, std::vector<double>& out) const override {
    if (k < 0 || size_t(k) >= p_.size()) return false;
    if (name == "params") {
      to_doubles(p_[size_t(k)], out);
    } else if (name == "momentum_buffer" && float(params_.get("momentum")) != 0) {
      to_doubles(first_bufs_.empty() ? b_[size_t(k)] : first_bufs_[size_t(k)], out);
    } else {
      return false;
    }
    return true;
  }

 private:
  Params params_;
  Buffers buf_;
  std::vector<at::Tensor> g_, p_, b_, first_bufs_;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

std::string unsupported(const PeerCase& c) {
  if (c.shape.size() != 2) return "fused_sgd shapes are [list_length, max_numel]";
  if (c.entry != "step") return "torch's SGD has no model-copy form: the peer runs step only";
  const Params& p = c.params;
  const bool wd = float(p.get("weight_decay")) != 0, mom = float(p.get("momentum")) != 0;
  if (wd && p.flag("wd_after_momentum"))
    return "torch's SGD adds weight decay before the momentum update only (no wd_after_momentum)";
  if (p.flag("nesterov") && (!mom || p.get("dampening") != 0))
    return "torch's SGD: \"Nesterov momentum requires a momentum and zero dampening\"";
  if (c.dtype != DType::f32) {
    // measured: p 1.7 f16 ulps off with first_run (ATen's add_ of two T tensors takes alpha in T)
    if (!mom || p.flag("first_run"))
      return "no momentum or first run: torch's param update adds a T gradient to T params, and ATen rounds its alpha "
             "(-lr) to T: p off by ~lr u_T |g|, outside the op's tolerance";
    // the scaled, decayed or Nesterov gradient is a T tensor in torch: rounded to T where the op
    // keeps it in f32, an error of u_T |g| in the f32 buffer and lr u_T |g| in p
    if (float(p.get("scale")) != 1.0f || wd || p.flag("nesterov"))
      return "scale, weight decay or Nesterov: torch rounds the modified gradient to T, the op keeps it in f32";
  }
  return probe(c, "fused_sgd", {3, 100}, make);
}

}  // namespace

OPF_PEER_ADAPTER(torch_fused_sgd, "torch", "fused_sgd", unsupported, make);

}  // namespace opf::suites::peers
