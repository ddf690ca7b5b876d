// oneDNN 2.6 layer normalization as a peer of layer_norm (forward_training and backward with
// scale and shift, f32 stats). oneDNN 2.6 needs equal src/dst dtypes and keeps scale/shift in
// f32, so bf16 runs read our bf16 data with f32 gamma/beta; f16 is not implemented on its CPU path
// (reported as unsupported). OpenMP threads: the benchmark's thread count, as our kernels and the probe.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <span>

#include "peers/peer.h"

namespace opf::suites::peers {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

bool dnnl_dtype(DType t, memory::data_type& out) {
  switch (t) {
    case DType::f32: out = memory::data_type::f32; return true;
    case DType::bf16: out = memory::data_type::bf16; return true;
    case DType::f16: out = memory::data_type::f16; return true;
    default: return false;
  }
}

const dnnl::normalization_flags kFlags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;

struct Descs {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  memory::desc data, stat, param;
  dnnl::layer_normalization_forward::primitive_desc fwd;
  dnnl::layer_normalization_backward::primitive_desc bwd;
};

// Throws dnnl::error when oneDNN has no implementation for the case.
void make_descs(const PeerCase& c, Descs& d) {
  memory::data_type dt{};
  if (!dnnl_dtype(c.dtype, dt)) throw std::runtime_error("no oneDNN dtype for " + std::string(dtype_name(c.dtype)));
  const memory::dim rows = c.shape[0], cols = c.shape[1];
  d.data = memory::desc({rows, cols}, dt, tag::ab);
  d.stat = memory::desc({rows}, memory::data_type::f32, tag::a);
  d.param = memory::desc({cols}, memory::data_type::f32, tag::a);
  const float eps = float(c.params.get("eps"));
  d.fwd = {{dnnl::prop_kind::forward_training, d.data, d.stat, eps, kFlags}, d.eng};
  if (c.entry == "backward") d.bwd = {{dnnl::prop_kind::backward, d.data, d.data, d.stat, eps, kFlags}, d.eng, d.fwd};
}

std::string unsupported(const PeerCase& c) {
  if (c.shape.size() != 2) return "layer_norm shapes are [rows, cols]";
  try {
    Descs d;
    make_descs(c, d);
  } catch (const std::exception& e) {
    return std::string("oneDNN 2.6: ") + e.what();
  }
  return {};
}

const HostArg& arg(const DrawnCase& d, std::string_view name) {
  for (const HostArg& h : d.host)
    if (h.desc->name == name) return h;
  throw std::runtime_error("layer_norm case has no argument '" + std::string(name) + "'");
}

class Run final : public PeerRun {
 public:
  Run(const PeerCase& c, const DrawnCase& drawn) : backward_(c.entry == "backward") {
    omp_set_num_threads(c.threads);
    make_descs(c, d_);
    const double eps = eps_ = c.params.get("eps");
    auto data_mem = [&](const HostArg& h) {  // same bits: f32 as f32, bf16 as bf16
      memory m(d_.data, d_.eng);
      std::memcpy(m.get_data_handle(), h.bytes.data(), h.bytes.size());
      return m;
    };
    auto f32_mem = [&](const memory::desc& md, const HostArg& h, auto&& transform) {
      memory m(md, d_.eng);
      auto* p = static_cast<float*>(m.get_data_handle());
      for (int64_t i = 0; i < h.desc->numel(); ++i)
        p[i] = float(transform(load_element(h.desc->dtype, h.bytes.data(), i)));
      return m;
    };
    auto same = [](double v) { return v; };
    if (!backward_) {
      args_ = {{DNNL_ARG_SRC, data_mem(arg(drawn, "x"))},
               {DNNL_ARG_SCALE, f32_mem(d_.param, arg(drawn, "gamma"), same)},
               {DNNL_ARG_SHIFT, f32_mem(d_.param, arg(drawn, "beta"), same)},
               {DNNL_ARG_DST, memory(d_.data, d_.eng)},
               {DNNL_ARG_MEAN, memory(d_.stat, d_.eng)},
               {DNNL_ARG_VARIANCE, memory(d_.stat, d_.eng)}};
      prim_ = dnnl::layer_normalization_forward(d_.fwd);
    } else {
      // oneDNN saves the variance where we save rstd = 1/sqrt(var + eps)
      auto variance = [eps](double rstd) { return 1.0 / (rstd * rstd) - eps; };
      args_ = {{DNNL_ARG_DIFF_DST, data_mem(arg(drawn, "dy"))},
               {DNNL_ARG_SRC, data_mem(arg(drawn, "x"))},
               {DNNL_ARG_MEAN, f32_mem(d_.stat, arg(drawn, "mean"), same)},
               {DNNL_ARG_VARIANCE, f32_mem(d_.stat, arg(drawn, "rstd"), variance)},
               {DNNL_ARG_SCALE, f32_mem(d_.param, arg(drawn, "gamma"), same)},
               // oneDNN 2.6 insists on a shift argument in backward too; the math never reads it
               {DNNL_ARG_SHIFT, f32_mem(d_.param, arg(drawn, "gamma"), same)},
               {DNNL_ARG_DIFF_SRC, memory(d_.data, d_.eng)},
               {DNNL_ARG_DIFF_SCALE, memory(d_.param, d_.eng)},
               {DNNL_ARG_DIFF_SHIFT, memory(d_.param, d_.eng)}};
      prim_ = dnnl::layer_normalization_backward(d_.bwd);
    }
  }

  void run() override {
    prim_.execute(stream_, args_);
    stream_.wait();
  }

  bool output(std::string_view name, std::vector<double>& out) const override {
    static const std::pair<std::string_view, int> kForward[] = {
        {"y", DNNL_ARG_DST}, {"mean", DNNL_ARG_MEAN}, {"rstd", DNNL_ARG_VARIANCE}};
    static const std::pair<std::string_view, int> kBackward[] = {
        {"dx", DNNL_ARG_DIFF_SRC}, {"dgamma", DNNL_ARG_DIFF_SCALE}, {"dbeta", DNNL_ARG_DIFF_SHIFT}};
    for (const auto& [ours, arg] : backward_ ? std::span(kBackward) : std::span(kForward)) {
      if (ours != name) continue;
      const memory& m = args_.at(arg);
      const memory::desc md = m.get_desc();
      const int64_t n = int64_t(md.get_size() / memory::data_type_size(md.data_type()));
      const DType t = md.data_type() == memory::data_type::bf16  ? DType::bf16
                      : md.data_type() == memory::data_type::f16 ? DType::f16
                                                                 : DType::f32;
      out.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i)
        out[size_t(i)] = load_element(t, static_cast<const std::byte*>(m.get_data_handle()), i);
      if (name == "rstd")
        for (double& v : out) v = 1.0 / std::sqrt(v + eps_);
      return true;
    }
    return false;
  }

 private:
  double eps_ = 0;
  bool backward_;
  Descs d_;
  dnnl::stream stream_{d_.eng};
  std::unordered_map<int, memory> args_;
  dnnl::primitive prim_;
};

std::unique_ptr<PeerRun> make(const PeerCase& c, const DrawnCase& drawn) { return std::make_unique<Run>(c, drawn); }

}  // namespace

OPF_PEER_ADAPTER(onednn_layer_norm, "onednn", "layer_norm", unsupported, make);

}  // namespace opf::suites::peers
