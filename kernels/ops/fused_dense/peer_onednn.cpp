// oneDNN 2.6 as a peer of fused_dense, f32: matmul primitives with the bias fused in
// (linear_bias_forward is one matmul with bias), GELU as oneDNN's eltwise gelu_tanh forward /
// backward primitives, bias gradients as reduction_sum primitives. linear_gelu_linear_forward must
// return the pre-activation h as well, which a matmul with a GELU post-op does not give (cuBLASLt's
// GELU_AUX epilogue has no oneDNN counterpart): matmul + bias -> h, eltwise -> a, matmul + bias ->
// y. f16/bf16 are not run: oneDNN would round the intermediates (a, dH) to T, where the op's
// contract keeps them in f32. OpenMP threads: the benchmark's thread count.
#include <omp.h>

#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <vector>

#include "peers/peer.h"

namespace opf::suites::peers {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

std::string unsupported(const PeerCase& c) {
  if (c.shape.size() != 4) return "fused_dense shapes are [batch, in, hidden, out]";
  if (c.dtype != DType::f32) return "f32 only (oneDNN would round the intermediates a, dH to the storage dtype)";
  for (int64_t d : c.shape)
    if (d == 0) return "oneDNN 2.6 refuses empty dims";
  if (c.shape[0] == 1 && c.entry.ends_with("backward"))
    return "oneDNN 2.6's reduction refuses a sum over one row (src and dst of the same shape)";
  return {};
}

const HostArg& arg(const DrawnCase& d, std::string_view name) {
  for (const HostArg& h : d.host)
    if (h.desc->name == name) return h;
  throw std::runtime_error("fused_dense case has no argument '" + std::string(name) + "'");
}

class Run final : public PeerRun {
 public:
  Run(const PeerCase& c, const DrawnCase& drawn) {
    omp_set_num_threads(c.threads);
    const memory::dim b = c.shape[0], in = c.shape[1], hid = c.shape[2], out = c.shape[3];
    auto in_mem = [&](std::string_view name, const memory::dims& dims, tag t) {
      memory m({dims, dt::f32, t}, eng_);
      const HostArg& h = arg(drawn, name);
      std::memcpy(m.get_data_handle(), h.bytes.data(), h.bytes.size());
      return m;
    };
    auto out_mem = [&](const std::string& name, const memory::dims& dims, tag t = tag::ab) {
      memory m({dims, dt::f32, t}, eng_);
      outs_[name] = m;
      return m;
    };
    if (c.entry == "linear_bias_forward") {
      matmul(in_mem("x", {b, in}, tag::ab), in_mem("weight", {in, hid}, tag::ba), in_mem("bias", {1, hid}, tag::ab),
             out_mem("y", {b, hid}));
    } else if (c.entry == "linear_bias_backward") {
      memory dy = in_mem("dy", {b, hid}, tag::ab), dyt = in_mem("dy", {hid, b}, tag::ba);
      matmul(dy, in_mem("weight", {hid, in}, tag::ab), {}, out_mem("dx", {b, in}));
      matmul(dyt, in_mem("x", {b, in}, tag::ab), {}, out_mem("dweight", {hid, in}));
      colsum(dy, out_mem("dbias", {1, hid}));
    } else if (c.entry == "linear_gelu_linear_forward") {
      memory h = out_mem("h", {b, hid}), a = out_mem("a", {b, hid});
      matmul(in_mem("x", {b, in}, tag::ab), in_mem("weight1", {in, hid}, tag::ba), in_mem("bias1", {1, hid}, tag::ab),
             h);
      gelu_fwd_ = {{dnnl::prop_kind::forward_training, dnnl::algorithm::eltwise_gelu_tanh, h.get_desc(), 0.f, 0.f},
                   eng_};
      steps_.push_back({dnnl::eltwise_forward(gelu_fwd_), {{DNNL_ARG_SRC, h}, {DNNL_ARG_DST, a}}});
      matmul(a, in_mem("weight2", {hid, out}, tag::ba), in_mem("bias2", {1, out}, tag::ab), out_mem("y", {b, out}));
    } else {
      memory dy = in_mem("dy", {b, out}, tag::ab), dyt = in_mem("dy", {out, b}, tag::ba);
      memory h = in_mem("h", {b, hid}, tag::ab), x = in_mem("x", {b, in}, tag::ab);
      matmul(dyt, in_mem("a", {b, hid}, tag::ab), {}, out_mem("dweight2", {out, hid}));
      colsum(dy, out_mem("dbias2", {1, out}));
      memory da({{b, hid}, dt::f32, tag::ab}, eng_), dh({{b, hid}, dt::f32, tag::ab}, eng_);
      matmul(dy, in_mem("weight2", {out, hid}, tag::ab), {}, da);
      gelu_fwd_ = {{dnnl::prop_kind::forward_training, dnnl::algorithm::eltwise_gelu_tanh, h.get_desc(), 0.f, 0.f},
                   eng_};
      dnnl::eltwise_backward::primitive_desc bwd(
          {dnnl::algorithm::eltwise_gelu_tanh, dh.get_desc(), h.get_desc(), 0.f, 0.f}, eng_, gelu_fwd_);
      steps_.push_back(
          {dnnl::eltwise_backward(bwd), {{DNNL_ARG_SRC, h}, {DNNL_ARG_DIFF_DST, da}, {DNNL_ARG_DIFF_SRC, dh}}});
      colsum(dh, out_mem("dbias1", {1, hid}));
      memory dht({{hid, b}, dt::f32, tag::ba}, eng_, dh.get_data_handle());
      matmul(dht, x, {}, out_mem("dweight1", {hid, in}));
      matmul(dh, in_mem("weight1", {hid, in}, tag::ab), {}, out_mem("dx", {b, in}));
    }
  }

  void run() override {
    for (auto& s : steps_) s.prim.execute(stream_, s.args);
    stream_.wait();
  }

  bool output(std::string_view name, std::vector<double>& o) const override {
    const auto it = outs_.find(std::string(name));
    if (it == outs_.end()) return false;
    const memory& m = it->second;
    const size_t n = m.get_desc().get_size() / 4;
    const float* p = static_cast<const float*>(m.get_data_handle());
    o.assign(p, p + n);
    return true;
  }

 private:
  struct Step {
    dnnl::primitive prim;
    std::unordered_map<int, memory> args;
  };
  // dst = src·weights (+ bias [1, n] when given)
  void matmul(const memory& src, const memory& w, const memory& bias, const memory& dst) {
    const bool has_bias = bias.get(true) != nullptr;
    const dnnl::matmul::desc d = has_bias
                                     ? dnnl::matmul::desc(src.get_desc(), w.get_desc(), bias.get_desc(), dst.get_desc())
                                     : dnnl::matmul::desc(src.get_desc(), w.get_desc(), dst.get_desc());
    Step s{dnnl::matmul(dnnl::matmul::primitive_desc(d, eng_)),
           {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, dst}}};
    if (has_bias) s.args[DNNL_ARG_BIAS] = bias;
    steps_.push_back(std::move(s));
  }
  // dst [1, n] = Σ_rows src [m, n]
  void colsum(const memory& src, const memory& dst) {
    const dnnl::reduction::desc d(dnnl::algorithm::reduction_sum, src.get_desc(), dst.get_desc(), 0.f, 0.f);
    steps_.push_back(
        {dnnl::reduction(dnnl::reduction::primitive_desc(d, eng_)), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}}});
  }

  dnnl::engine eng_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{eng_};
  dnnl::eltwise_forward::primitive_desc gelu_fwd_;
  std::vector<Step> steps_;
  std::unordered_map<std::string, memory> outs_;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

}  // namespace

OPF_PEER_ADAPTER(onednn_fused_dense, "onednn", "fused_dense", unsupported, make);

}  // namespace opf::suites::peers
