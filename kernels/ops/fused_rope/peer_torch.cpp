// PyTorch eager (libtorch 1.13, CPU) as a peer of fused_rope: Megatron / Transformer Engine's
// unfused apply_rotary_pos_emb, in T as those models run it:
//   cos_, sin_ = freqs.cos().to(T), freqs.sin().to(T)          (cached entries: given)
//   t_rot, t_pass = t[..., :d2], t[..., d2:]
//   out = cat(t_rot * cos_ + rotate_half(t_rot) * sin_, t_pass),  rotate_half(x) = cat(-x2, x1)
// Backward is autograd's sequence for that graph: dy_rot * cos_ + rotate_half^T(dy_rot * sin_),
// rotate_half^T(g) = cat(g2, -g1), then cat with dy_pass. The cached_f32 entries multiply a T
// tensor by f32 cos/sin, which torch promotes to f32 (as a model mixing them would), then .to(T).
// Packed thd has no eager form but a Python loop over sequences: not run. Nor the f16/bf16 entries
// with T cos/sin: eager rounds each of its three ops to T, outside the op's one-rounding tolerance
// (the cross-check fails), so they are reported as not run with that reason.
// 2-D entries (the eager form of apex's fused_apply_rotary_pos_emb_2d): t viewed as [b, img_h,
// img_w, h, d], t1, t2 = t.chunk(2, -1), each rotated as above with cos_h[:img_h] broadcast over
// the image's columns / cos_w[:img_w] over its rows, then cat: the same dtype rules (*_2d_f32 in f32).
#include <ATen/ops/cat.h>
#include <ATen/ops/cos.h>
#include <ATen/ops/sin.h>

#include "peers/torch/torch_peer.h"

namespace opf::suites::peers {
namespace {

using namespace torch_peer;

class Run final : public PeerRun {
 public:
  Run(const PeerCase& c, const DrawnCase& drawn)
      : backward_(c.entry.starts_with("backward")),
        cached_(c.entry.find("_cached") != std::string_view::npos),
        two_d_(c.entry.find("_2d") != std::string_view::npos),
        T_(scalar_type(c.dtype)),
        d2_(c.shape[4]),
        buf_(drawn) {
    use_threads(c.threads);
    in_ = buf_.arg(backward_ ? "grad_out" : "t");
    if (two_d_) {
      const int64_t q = in_.size(3) / 2, ph = int64_t(drawn.params.get("img_h")),
                    pw = int64_t(drawn.params.get("img_w"));
      const at::Tensor ch = buf_.arg("cos_h"), cw = buf_.arg("cos_w");
      img_h_ = ph ? ph : ch.size(1);
      img_w_ = pw ? pw : cw.size(1);
      // the image's rows of each table, broadcastable against [b, img_h, img_w, h, q]
      cos_ = ch.narrow(1, 0, img_h_).view({1, img_h_, 1, 1, q});
      sin_ = buf_.arg("sin_h").narrow(1, 0, img_h_).view({1, img_h_, 1, 1, q});
      cos_w_ = cw.narrow(1, 0, img_w_).view({1, 1, img_w_, 1, q});
      sin_w_ = buf_.arg("sin_w").narrow(1, 0, img_w_).view({1, 1, img_w_, 1, q});
    } else if (cached_) {
      cos_ = buf_.arg("cos");
      sin_ = buf_.arg("sin");
    } else {
      freqs_ = buf_.arg("freqs");
    }
  }

  // Eager's rotate-half of x (last dim w) with c, s; in f32 when c/s are (promotion), then to T.
  at::Tensor rope(const at::Tensor& x, const at::Tensor& c, const at::Tensor& s) const {
    const int64_t h = x.size(-1) / 2;
    if (!backward_) return x.mul(c).add(at::cat({x.narrow(-1, h, h).neg(), x.narrow(-1, 0, h)}, -1).mul(s)).to(T_);
    const at::Tensor g = x.mul(s);
    return x.mul(c).add(at::cat({g.narrow(-1, h, h), g.narrow(-1, 0, h).neg()}, -1)).to(T_);
  }

  void run() override {
    out_ = at::Tensor();
    if (two_d_) {
      const int64_t q = in_.size(3) / 2;
      const at::Tensor x = in_.view({in_.size(0), img_h_, img_w_, in_.size(2), in_.size(3)});
      out_ = at::cat({rope(x.narrow(-1, 0, q), cos_, sin_), rope(x.narrow(-1, q, q), cos_w_, sin_w_)}, -1)
                 .view(in_.sizes());
      return;
    }
    at::Tensor c = cos_, s = sin_;
    if (!cached_) {
      c = freqs_.cos().to(T_);
      s = freqs_.sin().to(T_);
    }
    const int64_t h = d2_ / 2, d = in_.size(-1);
    const at::Tensor rot = in_.narrow(-1, 0, d2_), pass = in_.narrow(-1, d2_, d - d2_);
    at::Tensor y;
    if (!backward_) {
      const at::Tensor half = at::cat({rot.narrow(-1, h, h).neg(), rot.narrow(-1, 0, h)}, -1);
      y = rot.mul(c).add(half.mul(s));
    } else {
      const at::Tensor g = rot.mul(s);
      y = rot.mul(c).add(at::cat({g.narrow(-1, h, h), g.narrow(-1, 0, h).neg()}, -1));
    }
    out_ = at::cat({y.to(T_), pass}, -1);
  }

  bool output(std::string_view name, std::vector<double>& out) const override {
    if (name != (backward_ ? "grad_t" : "out")) return false;
    to_doubles(out_, out);
    return true;
  }

 private:
  bool backward_, cached_, two_d_;
  at::ScalarType T_;
  int64_t d2_, img_h_ = 0, img_w_ = 0;
  Buffers buf_;
  at::Tensor in_, freqs_, cos_, sin_, cos_w_, sin_w_, out_;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

std::string unsupported(const PeerCase& c) {
  if (c.shape.size() != 5) return "fused_rope shapes are [s, b, h, d, d2]";
  if (c.entry.ends_with("_thd")) return "eager has no packed thd form (a Python loop over sequences)";
  if (c.entry.find("_2d") != std::string_view::npos && c.shape[3] % 4 != 0) return "2-D entries need d divisible by 4";
  if (c.dtype != DType::f32 && !c.entry.ends_with("_cached_f32") && !c.entry.ends_with("_2d_f32"))
    return "eager in " + std::string(dtype_name(c.dtype)) +
           " rounds t * cos, rotate_half(t) * sin and their sum to T each: outside the op's tolerance (one "
           "rounding); its cached_f32 / 2d_f32 forms compute in f32";
  return probe(c, "fused_rope", {3, 2, 2, 8, 4}, make);
}

}  // namespace

OPF_PEER_ADAPTER(torch_fused_rope, "torch", "fused_rope", unsupported, make);

}  // namespace opf::suites::peers
