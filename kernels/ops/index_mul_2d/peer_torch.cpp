// PyTorch eager (libtorch 1.13, CPU) as a peer of index_mul_2d: `in1.index_select(0, idx) * in2`
// (what apex's index_mul_2d computes, as a plain model writes it) and the ATen calls autograd makes
// for its backward and double backward (ATen has no autograd here: the peer calls the functional
// ops each backward node calls, in the engine's order):
//   forward:          t = index_select(in1, 0, idx); out = t * in2
//   backward:         t = index_select(in1, 0, idx)           (the tensor MulBackward0 saved: the
//                                                              entry has no forward to take it from)
//                     u = grad_out * in2; grad_in2 = grad_out * t   (MulBackward0: self, other)
//                     grad_in1 = zeros(M, F).index_add_(0, idx, u)  (IndexSelectBackward0)
//   double_backward:  the backward above differentiated again (create_graph=True), gg1, gg2 the
//                     gradients of grad_in1, grad_in2:
//                     t = index_select(in1, 0, idx)
//                     a = gg2 * t; v = gg2 * grad_out              (MulBackward0 of grad_out * t)
//                     grad_in1 = zeros(M, F).index_add_(0, idx, v) (IndexSelectBackward0)
//                     du = index_select(gg1, 0, idx)               (IndexAddBackward0, source)
//                     b = du * in2; grad_in2 = du * grad_out       (MulBackward0 of grad_out * in2)
//                     grad_grad_out = a + b                        (the engine's gradient accumulation)
// Every tensor in T: each product is rounded to T before index_add_ or the accumulation adds it,
// and index_add_ adds into the T tensor itself, one rounding per index (ATen's CPU kernel adds
// slice by slice). f32 stays within the op's tolerance; f16 only in forward (one product rounded
// once, as the op): backward and double_backward are not run (unsupported() says why).
#include <ATen/ops/index_add.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/zeros.h>

#include "peers/torch/torch_peer.h"

namespace opf::suites::peers {
namespace {

using namespace torch_peer;

enum class Entry { forward, backward, double_backward };

class Run final : public PeerRun {
 public:
  Run(const PeerCase& c, const DrawnCase& drawn)
      : entry_(c.entry == "forward"    ? Entry::forward
               : c.entry == "backward" ? Entry::backward
                                       : Entry::double_backward),
        buf_(drawn) {
    use_threads(c.threads);
    in1_ = buf_.arg("in1");
    in2_ = buf_.arg("in2");
    idx_ = buf_.arg("idx");
    if (entry_ != Entry::forward) g_ = buf_.arg("grad_out");
    if (entry_ == Entry::double_backward) {
      gg1_ = buf_.arg("grad_grad_in1");
      gg2_ = buf_.arg("grad_grad_in2");
    }
  }

  void run() override {
    // the previous call's outputs go back to the allocator first, as a training loop's would
    out_ = g1_ = g2_ = ggo_ = at::Tensor();
    const at::Tensor t = at::index_select(in1_, 0, idx_);
    switch (entry_) {
      case Entry::forward: out_ = at::mul(t, in2_); break;
      case Entry::backward: {
        const at::Tensor u = at::mul(g_, in2_);
        g2_ = at::mul(g_, t);
        g1_ = at::zeros(in1_.sizes(), in1_.options()).index_add_(0, idx_, u);
        break;
      }
      case Entry::double_backward: {
        const at::Tensor a = at::mul(gg2_, t), v = at::mul(gg2_, g_);
        g1_ = at::zeros(in1_.sizes(), in1_.options()).index_add_(0, idx_, v);
        const at::Tensor du = at::index_select(gg1_, 0, idx_);
        const at::Tensor b = at::mul(du, in2_);
        g2_ = at::mul(du, g_);
        ggo_ = a.add(b);
        break;
      }
    }
  }

  bool output(std::string_view name, std::vector<double>& out) const override {
    const at::Tensor* t = nullptr;
    if (name == "out") t = &out_;
    if (name == "grad_in1") t = &g1_;
    if (name == "grad_in2") t = &g2_;
    if (name == "grad_grad_out") t = &ggo_;
    if (!t || !t->defined()) return false;
    to_doubles(*t, out);
    return true;
  }

 private:
  Entry entry_;
  Buffers buf_;
  at::Tensor in1_, in2_, idx_, g_, gg1_, gg2_, out_, g1_, g2_, ggo_;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

std::string unsupported(const PeerCase& c) {
  if (c.shape.size() != 3) return "index_mul_2d shapes are [M, N, F]";
  // measured by the cross-check: the op sums and adds in f32 and rounds once
  if (c.dtype == DType::f16 && c.entry == "backward")
    return "torch rounds each product to f16 and index_add_ adds into the f16 grad_in1 (a rounding per index): "
           "grad_in1 misses the op's tolerance";
  if (c.dtype == DType::f16 && c.entry == "double_backward")
    return "torch rounds both products of grad_grad_out to f16 before adding them, and grad_in1 as in backward: both "
           "miss the op's tolerance";
  return probe(c, "index_mul_2d", {5, 7, 3}, make);
}

}  // namespace

OPF_PEER_ADAPTER(torch_index_mul_2d, "torch", "index_mul_2d", unsupported, make);

}  // namespace opf::suites::peers
