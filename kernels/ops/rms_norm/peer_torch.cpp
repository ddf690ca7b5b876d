// PyTorch eager (libtorch 1.13, CPU) as a peer of rms_norm. torch 1.13 has no RMSNorm op: this is
// the composed module models ship (HF's LlamaRMSNorm): x32 = x.float(); rstd =
// rsqrt(x32.pow(2).mean(-1, keepdim) + eps); y = gamma * (x32 * rstd).to(T). Backward is the op
// sequence autograd runs for that graph, given the tensors it saves (x32, rstd, (x32*rstd).to(T),
// gamma), which are prepared outside the timed region:
//   g_h = (dy * gamma).float(); dgamma = (dy * h_T).sum(0)
//   dx32 = g_h * rstd + (g_h * x32).sum(-1, keepdim) * (-0.5 * rstd^3) * 2 * x32 / cols
//   dx = dx32.to(T)
#include "peers/torch/torch_peer.h"

namespace opf::suites::peers {
namespace {

using namespace torch_peer;

class Run final : public PeerRun {
 public:
  Run(const PeerCase& c, const DrawnCase& drawn)
      : backward_(c.entry == "backward"), T_(scalar_type(c.dtype)), eps_(c.params.get("eps")), buf_(drawn) {
    use_threads(c.threads);
    rows_ = c.shape[0];
    cols_ = c.shape[1];
    x_ = buf_.arg("x");
    gamma_ = buf_.arg("gamma");
    if (backward_) {
      dy_ = buf_.arg("dy");
      rstd_ = buf_.arg("rstd", -1, {rows_, 1});
      x32_ = x_.to(at::kFloat);
      h_ = x32_.mul(rstd_).to(T_);
    }
  }

  void run() override {
    y_ = rstd_out_ = dx_ = dgamma_ = at::Tensor();
    if (!backward_) {
      const at::Tensor x32 = x_.to(at::kFloat);
      rstd_out_ = x32.pow(2).mean(-1, true).add(eps_).rsqrt();
      y_ = gamma_.mul(x32.mul(rstd_out_).to(T_));
    } else {
      const at::Tensor g_h = dy_.mul(gamma_).to(at::kFloat);
      dgamma_ = dy_.mul(h_).sum(0);
      const at::Tensor g_rstd = g_h.mul(x32_).sum(-1, true);
      const at::Tensor g_var = g_rstd.mul(rstd_.pow(3).mul(-0.5));                // rsqrt's backward
      const at::Tensor g_x_sq = g_var.expand({rows_, cols_}).div(double(cols_));  // mean's
      dx_ = g_h.mul(rstd_).add(g_x_sq.mul(x32_.mul(2.0))).to(T_);                 // mul's and pow's, summed
    }
  }

  bool output(std::string_view name, std::vector<double>& out) const override {
    const at::Tensor* t = nullptr;
    if (!backward_ && name == "y") t = &y_;
    if (!backward_ && name == "rstd") t = &rstd_out_;
    if (backward_ && name == "dx") t = &dx_;
    if (backward_ && name == "dgamma") t = &dgamma_;
    if (!t) return false;
    to_doubles(*t, out);
    return true;
  }

 private:
  bool backward_;
  at::ScalarType T_;
  double eps_;
  int64_t rows_ = 0, cols_ = 0;
  Buffers buf_;
  at::Tensor x_, gamma_, dy_, rstd_, x32_, h_, y_, rstd_out_, dx_, dgamma_;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

std::string unsupported(const PeerCase& c) {
  if (c.shape.size() != 2) return "rms_norm shapes are [rows, cols]";
  // autograd forms dy * gamma in T (y = gamma * h_T) before the f32 part; on rows with a large
  // mean the two f32 terms of dx cancel and that rounding is all that is left
  if (c.entry == "backward" && c.dtype != DType::f32)
    return std::string(dtype_name(c.dtype)) + " backward: autograd's dy * gamma rounded to " +
           std::string(dtype_name(c.dtype)) + " cancels to far outside the op's tolerance on rows with a large mean";
  return probe(c, "rms_norm", {2, 8}, make);
}

}  // namespace

OPF_PEER_ADAPTER(torch_rms_norm, "torch", "rms_norm", unsupported, make);

}  // namespace opf::suites::peers
