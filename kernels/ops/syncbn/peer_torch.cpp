// PyTorch eager (libtorch 1.13, CPU) as a peer of syncbn: what a training step of BatchNorm runs
// on the CPU, where torch has none of SyncBatchNorm's split kernels (batch_norm_stats,
// batch_norm_gather_stats_with_counts, batch_norm_elemt, batch_norm_backward_reduce and
// batch_norm_backward_elemt are CUDA-only in 1.13: the entries that would need them are reported
// as not run, with that reason). Entry by entry:
//   welford[_c_last]          batch_norm_update_stats(x) -> mean, biased var (the CPU training
//                             statistics; no running stats given, so none updated)
//   forward[_c_last]          native_batch_norm(x, weight, bias, mean, var, training = false):
//                             normalizing with given statistics is eval mode; var = 1/invstd^2 - eps,
//                             made when the run is set up, so torch's invstd is ours to rounding
//   forward_z_c_last          the same, then add(y, z) (the residual) and relu with fuse_relu:
//                             three ops, as eager runs BatchNorm -> + -> ReLU
//   relu_backward[_z]_c_last  threshold_backward(dy, y, 0): eager saves the ReLU's output y (made
//                             by the forward's ops when the run is set up) instead of recomputing
//   backward_reduce[_c_last]  native_batch_norm_backward(train, mask {0, 1, 1}) -> grad_weight,
//                             grad_bias (torch has no sum_dy / sum_dy_xmu outputs: not compared)
//   backward_elemt[_c_last]   native_batch_norm_backward(train, mask {1, 0, 0}) -> dx: torch reduces
//                             dy and dy (x - mean) itself, in the same call, so it matches our dx
//                             where the sums are this shard's own and count_all its size (the
//                             single-process case the sweep draws); it also does the reduce pass
// f16 and bf16 run the f32 kernels on upcast inputs (torch 1.13 has no f16 CPU batch norm, and its
// bf16 one keeps the statistics in bf16), as layer_norm's torch peer: the casts of the tensors the
// step reads are timed, the saved tensors (x for the backward, y for the ReLU's) are f32 already.
#include <ATen/ops/add.h>
#include <ATen/ops/batch_norm_update_stats.h>
#include <ATen/ops/native_batch_norm.h>
#include <ATen/ops/native_batch_norm_backward.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/threshold_backward.h>

#include <algorithm>
#include <cmath>

#include "peers/torch/torch_peer.h"

namespace opf::suites::peers {
namespace {

using namespace torch_peer;

enum class Kind { stats, forward, relu_backward, reduce, elemt };

Kind kind_of(std::string_view entry) {
  if (entry.starts_with("welford")) return Kind::stats;
  if (entry.starts_with("forward")) return Kind::forward;
  if (entry.starts_with("relu_backward")) return Kind::relu_backward;
  if (entry.starts_with("backward_reduce")) return Kind::reduce;
  return Kind::elemt;
}

class Run final : public PeerRun {
 public:
  Run(const PeerCase& c, const DrawnCase& drawn)
      : kind_(kind_of(c.entry)),
        upcast_(c.dtype != DType::f32),
        z_(std::string_view(c.entry).ends_with("_z_c_last")),
        relu_(std::string_view(c.entry).ends_with("_c_last") && c.params.flag("fuse_relu")),
        T_(scalar_type(c.dtype)),
        eps_(c.params.get("eps")),
        momentum_(c.params.get("momentum")),
        buf_(drawn) {
    use_threads(c.threads);
    x_ = buf_.arg("x");
    if (kind_ == Kind::stats) return;
    mean_ = buf_.arg("mean");
    invstd_ = buf_.arg("invstd");
    // the variance torch's eval mode wants: 1/invstd^2 - eps, in f64 (>= 0: a one-value channel
    // has var 0, and rounding must not make it negative)
    const at::Tensor is = invstd_.to(at::kDouble);
    var_ = is.pow(-2).sub(eps_).clamp_min(0).to(at::kFloat);
    if (kind_ != Kind::reduce) weight_ = buf_.arg("weight");
    if (kind_ == Kind::forward || kind_ == Kind::relu_backward) bias_ = buf_.arg("bias");
    if (z_) z_t_ = buf_.arg("z");
    if (kind_ != Kind::forward) {
      dy_ = buf_.arg("dy");
      if (upcast_) x_ = x_.to(at::kFloat);  // the forward's saved input
    }
    if (kind_ == Kind::relu_backward) {
      forward(x_, z_ ? z_t_.to(at::kFloat) : at::Tensor(), true);
      saved_y_ = y32_;
      y32_ = at::Tensor();
    }
  }

  void run() override {
    // the previous call's outputs go back to the allocator first, as a training loop's would
    y32_ = out_ = mean_out_ = var_out_ = gw_ = gb_ = at::Tensor();
    switch (kind_) {
      case Kind::stats:
        std::tie(mean_out_, var_out_) =
            at::batch_norm_update_stats(upcast_ ? x_.to(at::kFloat) : x_, c10::nullopt, c10::nullopt, momentum_);
        return;
      case Kind::forward:
        forward(upcast_ ? x_.to(at::kFloat) : x_, z_ ? (upcast_ ? z_t_.to(at::kFloat) : z_t_) : at::Tensor(), relu_);
        if (upcast_) out_ = y32_.to(T_);
        return;
      case Kind::relu_backward:
        y32_ = at::threshold_backward(upcast_ ? dy_.to(at::kFloat) : dy_, saved_y_, 0);
        if (upcast_) out_ = y32_.to(T_);
        return;
      case Kind::reduce:
        std::tie(std::ignore, gw_, gb_) =
            at::native_batch_norm_backward(upcast_ ? dy_.to(at::kFloat) : dy_, x_, c10::nullopt, c10::nullopt,
                                           c10::nullopt, mean_, invstd_, true, eps_, {false, true, true});
        return;
      case Kind::elemt:
        std::tie(y32_, std::ignore, std::ignore) =
            at::native_batch_norm_backward(upcast_ ? dy_.to(at::kFloat) : dy_, x_, weight_, c10::nullopt, c10::nullopt,
                                           mean_, invstd_, true, eps_, {true, false, false});
        if (upcast_) out_ = y32_.to(T_);
        return;
    }
  }

  bool output(std::string_view name, std::vector<double>& out) const override {
    const at::Tensor* t = nullptr;
    const at::Tensor& data_out = upcast_ ? out_ : y32_;
    switch (kind_) {
      case Kind::stats:
        if (name == "mean") t = &mean_out_;
        if (name == "var_biased") t = &var_out_;
        break;
      case Kind::forward:
        if (name == "y") t = &data_out;
        break;
      case Kind::relu_backward:
        if (name == "dy_masked") t = &data_out;
        break;
      case Kind::reduce:
        if (name == "grad_weight") t = &gw_;
        if (name == "grad_bias") t = &gb_;
        break;
      case Kind::elemt:
        if (name == "dx") t = &data_out;
        break;
    }
    if (!t) return false;
    to_doubles(*t, out);
    return true;
  }

 private:
  // BatchNorm with the given statistics, then + z and ReLU: each an eager op of its own
  void forward(const at::Tensor& x, const at::Tensor& z, bool relu) {
    at::Tensor y = std::get<0>(at::native_batch_norm(x, weight_, bias_, mean_, var_, false, 0.0, eps_));
    if (z.defined()) y = at::add(y, z);
    if (relu) y = at::relu(y);
    y32_ = y;
  }

  Kind kind_;
  bool upcast_, z_, relu_;
  at::ScalarType T_;
  double eps_, momentum_;
  Buffers buf_;
  at::Tensor x_, z_t_, dy_, mean_, invstd_, var_, weight_, bias_, saved_y_, y32_, out_, mean_out_, var_out_, gw_, gb_;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

std::string unsupported(const PeerCase& c) {
  if (c.shape.size() != 3) return "syncbn shapes are [N, C, HW]";
  if (c.entry == "welford_parallel")
    return "torch 1.13 merges shard statistics only on CUDA (batch_norm_gather_stats_with_counts has no CPU kernel)";
  return probe(c, "syncbn", {2, 3, 4}, make);
}

}  // namespace

OPF_PEER_ADAPTER(torch_syncbn, "torch", "syncbn", unsupported, make);

}  // namespace opf::suites::peers
