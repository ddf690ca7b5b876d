// PyTorch eager (libtorch 1.13, CPU) as a peer of multi_tensor: the foreach ops a Python caller
// without apex's amp_C writes (1.13's CPU foreach kernels run tensor by tensor):
//   scale:  out = torch._foreach_mul(in, scale)
//   axpby:  out = torch._foreach_mul(x, a); torch._foreach_add_(out, y, alpha=b)
//   l2norm: norms = torch._foreach_norm(tensors, 2); norm = torch.linalg.vector_norm(
//           torch.stack(norms)) (clip_grad_norm_'s norm of norms). f16/bf16: 1.13's _foreach_norm
//           has no dtype argument and returns T norms, which round away more than the op's f32
//           norms allow, so the peer runs the loop _foreach_norm runs on the CPU with
//           dtype=torch.float32: linalg.vector_norm(t, 2, dtype=torch.float32) per tensor.
// noop_flag: torch has none. What a user compares against is GradScaler's found_inf, but 1.13's
// _amp_foreach_non_finite_check_and_unscale_ has no CPU kernel (CUDA only), so the peer runs what
// a CPU user writes instead, after the arithmetic as amp_C sets its flag beside it:
//   scale, axpby: found = not all(torch.isfinite(t).all() for t in checked) (Python's all():
//                 stops at the first tensor with a non-finite value), over in (scale) or over x
//                 and/or y as arg_to_check says (axpby)
//   l2norm:       found = not norm.isfinite() (clip_grad_norm_'s error_if_nonfinite test)
// Rounding: each eager op rounds to out's dtype; axpby's x*a is rounded to T before the add (the
// op rounds once), which only the default a = 1 makes exact; the cross-check runs the defaults.
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_norm.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/stack.h>

#include <cmath>

#include "peers/torch/torch_peer.h"

namespace opf::suites::peers {
namespace {

using namespace torch_peer;

class Run final : public PeerRun {
 public:
  Run(const PeerCase& c, const DrawnCase& drawn)
      : entry_(c.entry), T_(scalar_type(c.dtype)), params_(c.params), buf_(drawn) {
    use_threads(c.threads);
    const char* lead = entry_ == "scale" ? "in" : entry_ == "axpby" ? "x" : "tensors";
    const int n = buf_.list_size(lead);
    for (int k = 0; k < n; ++k) {
      x_.push_back(buf_.arg(lead, k));
      if (entry_ == "axpby") y_.push_back(buf_.arg("y", k));
    }
    if (entry_ != "l2norm" && n > 0) out_dtype_ = scalar_type(buf_.host("out", 0).desc->dtype);
  }

  void run() override {
    out_.clear();
    per_.clear();
    bad_ = false;
    norm_ = 0;
    if (x_.empty()) return;  // 1.13's foreach ops refuse empty lists; apex's empty list is a no-op
    if (entry_ == "scale") {
      out_ = at::_foreach_mul(x_, params_.get("scale"));
      finish_out();
      bad_ = any_nonfinite(x_);
    } else if (entry_ == "axpby") {
      out_ = at::_foreach_mul(x_, params_.get("a"));
      at::_foreach_add_(out_, y_, params_.get("b"));
      finish_out();
      const int64_t check = params_.get_int("arg_to_check");  // choice index: apex -1, 0, 1
      bad_ = (check != 2 && any_nonfinite(x_)) || (check != 1 && any_nonfinite(y_));
    } else {
      if (T_ == at::kFloat) {
        per_ = at::_foreach_norm(x_, 2);
      } else {
        for (const at::Tensor& t : x_) per_.push_back(at::linalg_vector_norm(t, 2, c10::nullopt, false, at::kFloat));
      }
      norm_ = at::linalg_vector_norm(at::stack(per_), 2).item<float>();
      bad_ = !std::isfinite(norm_);
    }
  }

  bool output(std::string_view name, std::vector<double>& out) const override {
    if (name == "noop_flag") {
      out.assign(1, bad_ ? 1.0 : 0.0);  // the drawn flag is 0
    } else if (name == "norm" && entry_ == "l2norm") {
      out.assign(1, double(norm_));
    } else if (name == "per_tensor_norms" && entry_ == "l2norm") {
      out.clear();
      if (params_.flag("per_tensor"))
        for (const at::Tensor& t : per_) out.push_back(t.item<double>());
    } else {
      return false;
    }
    return true;
  }

  bool output(std::string_view name, int k, std::vector<double>& out) const override {
    if (k < 0) return output(name, out);
    if (name != "out" || size_t(k) >= out_.size()) return false;
    to_doubles(out_[size_t(k)], out);
    return true;
  }

 private:
  // out of another dtype than the inputs (apex's unscale into f32 masters): eager's .to() per tensor
  void finish_out() {
    if (out_dtype_ == T_) return;
    for (at::Tensor& t : out_) t = t.to(out_dtype_);
  }

  static bool any_nonfinite(const std::vector<at::Tensor>& ts) {
    for (const at::Tensor& t : ts)
      if (!at::isfinite(t).all().item<bool>()) return true;
    return false;
  }

  std::string entry_;
  at::ScalarType T_, out_dtype_ = at::kFloat;
  Params params_;
  Buffers buf_;
  std::vector<at::Tensor> x_, y_, out_, per_;
  float norm_ = 0;
  bool bad_ = false;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

std::string unsupported(const PeerCase& c) {
  if (c.shape.size() != 2) return "multi_tensor shapes are [list_length, max_numel]";
  if (c.entry != "scale" && c.entry != "axpby" && c.entry != "l2norm") return "multi_tensor has scale, axpby, l2norm";
  return probe(c, "multi_tensor", {3, 100}, make);
}

}  // namespace

OPF_PEER_ADAPTER(torch_multi_tensor, "torch", "multi_tensor", unsupported, make);

}  // namespace opf::suites::peers
