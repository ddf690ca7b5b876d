// PyTorch eager (libtorch 1.13, CPU) as a peer of layer_norm: the ATen ops torch.nn.LayerNorm
// runs, native_layer_norm forward and native_layer_norm_backward (what autograd calls).
// f16 and bf16 run the f32 kernel on upcast inputs, as CPU autocast's fp32 policy does: torch
// 1.13 has no f16 CPU kernel, and its bf16 kernel keeps mean and rstd in bf16, which puts y two
// orders of magnitude outside the op's bf16 tolerance (and dgamma, from bf16 rstd, outside it
// too). So for them the timed call includes the casts: forward x, gamma, beta -> f32 and y -> T;
// backward dy -> f32 and dx, dgamma, dbeta -> T, with x in f32 as the forward saved it (autograd
// keeps the upcast input), prepared outside the timed region.
#include <ATen/ops/native_layer_norm.h>
#include <ATen/ops/native_layer_norm_backward.h>

#include "peers/torch/torch_peer.h"

namespace opf::suites::peers {
namespace {

using namespace torch_peer;

class Run final : public PeerRun {
 public:
  Run(const PeerCase& c, const DrawnCase& drawn)
      : backward_(c.entry == "backward"),
        upcast_(c.dtype != DType::f32),
        T_(scalar_type(c.dtype)),
        eps_(c.params.get("eps")),
        buf_(drawn) {
    use_threads(c.threads);
    const int64_t rows = c.shape[0];
    cols_ = c.shape[1];
    gamma_ = buf_.arg("gamma");
    x_ = buf_.arg("x");
    if (!backward_) {
      beta_ = buf_.arg("beta");
    } else {
      dy_ = buf_.arg("dy");
      mean_ = buf_.arg("mean", -1, {rows, 1});
      rstd_ = buf_.arg("rstd", -1, {rows, 1});
      if (upcast_) x_ = x_.to(at::kFloat);  // the forward's saved input
    }
  }

  void run() override {
    // the previous call's outputs go back to the allocator first, as a training loop's would
    y32_ = y_ = dx32_ = dgamma32_ = dbeta32_ = dx_ = dgamma_ = dbeta_ = at::Tensor();
    if (!backward_) {
      mean_ = rstd_ = at::Tensor();
      if (!upcast_) {
        std::tie(y32_, mean_, rstd_) = at::native_layer_norm(x_, {cols_}, gamma_, beta_, eps_);
      } else {
        std::tie(y32_, mean_, rstd_) =
            at::native_layer_norm(x_.to(at::kFloat), {cols_}, gamma_.to(at::kFloat), beta_.to(at::kFloat), eps_);
        y_ = y32_.to(T_);
      }
    } else {
      // ATen allocates dbeta like beta, which backward never reads: gamma stands in for it
      const at::Tensor g = upcast_ ? gamma_.to(at::kFloat) : gamma_;
      std::tie(dx32_, dgamma32_, dbeta32_) = at::native_layer_norm_backward(
          upcast_ ? dy_.to(at::kFloat) : dy_, x_, {cols_}, mean_, rstd_, g, g, {true, true, true});
      if (upcast_) {
        dx_ = dx32_.to(T_);
        dgamma_ = dgamma32_.to(T_);
        dbeta_ = dbeta32_.to(T_);
      }
    }
  }

  bool output(std::string_view name, std::vector<double>& out) const override {
    const at::Tensor* t = nullptr;
    if (!backward_) {
      if (name == "y") t = upcast_ ? &y_ : &y32_;
      if (name == "mean") t = &mean_;
      if (name == "rstd") t = &rstd_;
    } else {
      if (name == "dx") t = upcast_ ? &dx_ : &dx32_;
      if (name == "dgamma") t = upcast_ ? &dgamma_ : &dgamma32_;
      if (name == "dbeta") t = upcast_ ? &dbeta_ : &dbeta32_;
    }
    if (!t) return false;
    to_doubles(*t, out);
    return true;
  }

 private:
  bool backward_, upcast_;
  at::ScalarType T_;
  double eps_;
  int64_t cols_ = 0;
  Buffers buf_;
  at::Tensor x_, gamma_, beta_, y32_, y_, mean_, rstd_, dy_, dx32_, dgamma32_, dbeta32_, dx_, dgamma_, dbeta_;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

std::string unsupported(const PeerCase& c) {
  if (c.shape.size() != 2) return "layer_norm shapes are [rows, cols]";
  // ATen computes y = x * (rstd*gamma) + (beta - mean*rstd*gamma): with one column var = 0 and
  // rstd = 1/sqrt(eps), and the two terms cancel to ~ulp(x/sqrt(eps)) (0.7 -> beta - 1e-5 in f32)
  if (c.shape[1] == 1)
    return "one-column rows: torch's x*a + b form cancels catastrophically at var = 0 (error ~ulp(x/sqrt(eps)))";
  // ATen's backward forms dx as a*dy + b*x + c, never x - mean: with a large row mean (the
  // checks' offset variant) its f32 result rounded to bf16 misses the op's bf16 tolerance by a few
  // percent of the allowance, in about one run of three (f16's finer grid absorbs it)
  if (c.entry == "backward" && c.dtype == DType::bf16)
    return "bf16 backward: torch's dx = a*dy + b*x + c misses the op's bf16 tolerance on rows with a large mean (x - "
           "mean never formed)";
  return probe(c, "layer_norm", {2, 8}, make);
}

}  // namespace

OPF_PEER_ADAPTER(torch_layer_norm, "torch", "layer_norm", unsupported, make);

}  // namespace opf::suites::peers
