// PyTorch eager (libtorch 1.13, CPU) as a peer of fused_dense: the ATen calls that
// torch.nn.functional.linear and gelu make, and those autograd makes for their backward (ATen has
// no autograd here: the peer calls the functional ops each backward node calls):
//   linear_bias_forward:   y = linear(x, W, b)            (2-D input with bias: addmm(b, x, W^T))
//   linear_bias_backward:  dx = mm(dy, W); dW = mm(dy^T, x); db = sum(dy, 0)
//                          (AddmmBackward0: mm_mat1_backward, mm_mat2_backward, which for W^T's
//                          transposed strides forms dy^T.mm(x); the bias gradient is autograd's
//                          sum_to of the broadcast bias)
//   linear_gelu_linear_forward:  h = linear(x, W1, b1); a = gelu(h, approximate="tanh");
//                                y = linear(a, W2, b2)
//   linear_gelu_linear_backward: dW2 = mm(dy^T, a); db2 = sum(dy, 0); dA = mm(dy, W2);
//                                dH = gelu_backward(dA, h, approximate="tanh");
//                                dW1 = mm(dH^T, x); db1 = sum(dH, 0); dx = mm(dH, W1)
// Every tensor in T, as eager keeps it: the intermediates a (as the second GEMM reads it), dA and
// dH are rounded to T, where the op keeps them in f32 (ref.cpp), so a T whose rounding of them
// misses the op's tolerance is not run (unsupported() says which: of bf16, linear_bias_forward
// runs). torch 1.13 has no f16 CPU GEMM: the probe reports its message.
#include <ATen/ops/gelu.h>
#include <ATen/ops/gelu_backward.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/sum.h>

#include "peers/torch/torch_peer.h"

namespace opf::suites::peers {
namespace {

using namespace torch_peer;

enum class Entry { bias_fwd, bias_bwd, gelu_fwd, gelu_bwd };

Entry entry_of(std::string_view e) {
  if (e == "linear_bias_forward") return Entry::bias_fwd;
  if (e == "linear_bias_backward") return Entry::bias_bwd;
  if (e == "linear_gelu_linear_forward") return Entry::gelu_fwd;
  return Entry::gelu_bwd;
}

class Run final : public PeerRun {
 public:
  Run(const PeerCase& c, const DrawnCase& drawn) : entry_(entry_of(c.entry)), buf_(drawn) {
    use_threads(c.threads);
    x_ = buf_.arg("x");
    switch (entry_) {
      case Entry::bias_fwd:
        w1_ = buf_.arg("weight");
        b1_ = buf_.arg("bias");
        break;
      case Entry::bias_bwd:
        dy_ = buf_.arg("dy");
        w1_ = buf_.arg("weight");
        break;
      case Entry::gelu_fwd:
        w1_ = buf_.arg("weight1");
        b1_ = buf_.arg("bias1");
        w2_ = buf_.arg("weight2");
        b2_ = buf_.arg("bias2");
        break;
      case Entry::gelu_bwd:
        dy_ = buf_.arg("dy");
        h_ = buf_.arg("h");
        a_ = buf_.arg("a");
        w1_ = buf_.arg("weight1");
        w2_ = buf_.arg("weight2");
        break;
    }
  }

  void run() override {
    // the previous call's outputs go back to the allocator first, as a training loop's would
    for (auto* t : {&y_, &hout_, &aout_, &dx_, &dw1_, &db1_, &dw2_, &db2_}) *t = at::Tensor();
    switch (entry_) {
      case Entry::bias_fwd: y_ = at::linear(x_, w1_, b1_); break;
      case Entry::bias_bwd:
        dx_ = at::mm(dy_, w1_);
        dw1_ = at::mm(dy_.t(), x_);
        db1_ = at::sum(dy_, {0});
        break;
      case Entry::gelu_fwd:
        hout_ = at::linear(x_, w1_, b1_);
        aout_ = at::gelu(hout_, "tanh");
        y_ = at::linear(aout_, w2_, b2_);
        break;
      case Entry::gelu_bwd: {
        dw2_ = at::mm(dy_.t(), a_);
        db2_ = at::sum(dy_, {0});
        const at::Tensor da = at::mm(dy_, w2_);
        const at::Tensor dh = at::gelu_backward(da, h_, "tanh");
        dw1_ = at::mm(dh.t(), x_);
        db1_ = at::sum(dh, {0});
        dx_ = at::mm(dh, w1_);
        break;
      }
    }
  }

  bool output(std::string_view name, std::vector<double>& out) const override {
    const at::Tensor* t = nullptr;
    const bool gelu = entry_ == Entry::gelu_fwd || entry_ == Entry::gelu_bwd;
    if (name == "y") t = &y_;
    if (name == "h" && entry_ == Entry::gelu_fwd) t = &hout_;
    if (name == "a" && entry_ == Entry::gelu_fwd) t = &aout_;
    if (name == "dx") t = &dx_;
    if (name == (gelu ? "dweight1" : "dweight")) t = &dw1_;
    if (name == (gelu ? "dbias1" : "dbias")) t = &db1_;
    if (name == "dweight2") t = &dw2_;
    if (name == "dbias2") t = &db2_;
    if (!t || !t->defined()) return false;
    to_doubles(*t, out);
    return true;
  }

 private:
  Entry entry_;
  Buffers buf_;
  at::Tensor x_, dy_, h_, a_, w1_, b1_, w2_, b2_;
  at::Tensor y_, hout_, aout_, dx_, dw1_, db1_, dw2_, db2_;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

std::string unsupported(const PeerCase& c) {
  if (c.shape.size() != 4) return "fused_dense shapes are [batch, in, hidden, out]";
  // measured by the cross-check (linear_bias_forward bf16 passes it): addmm's x W^T stays within
  // the op's tolerance, the rest does not
  if (c.dtype == DType::bf16) {
    if (c.entry == "linear_bias_backward")
      return "torch 1.13's bf16 CPU mm outside oneDNN (small shapes) is not f32-accurate: dx ends 2 bf16 ulps off at K "
             "= 7, outside the op's tolerance";
    if (c.entry == "linear_gelu_linear_forward")
      return "torch rounds h to bf16 before gelu and a before the second GEMM, where the op keeps them in f32: a "
             "misses the op's tolerance";
    if (c.entry == "linear_gelu_linear_backward")
      return "torch rounds dA and dH to bf16, and its bf16 gelu_backward (tanh) is far less accurate than one "
             "rounding: dx 30 % off on the one-element case";
  }
  // ATen's tanh GELU and its backward are 0.5 h (1 + tanh v) and 0.5 (1 + tanh v) + ..., which cancel
  // for h near -3 (up to ~200 f32 ulps of GELU(h) or GELU'(h) off there, measured against the float64
  // formula); the op's tolerance absorbs that where an output has other elements to set its scale
  if (c.entry.starts_with("linear_gelu_linear") && c.shape[2] == 1)
    return "one hidden unit: each output is one GELU or GELU' value, which torch's tanh form gets up to ~200 f32 ulps "
           "wrong for h near -3, beyond the op's tolerance";
  return probe(c, "fused_dense", {3, 5, 7, 2}, make);
}

}  // namespace

OPF_PEER_ADAPTER(torch_fused_dense, "torch", "fused_dense", unsupported, make);

}  // namespace opf::suites::peers
