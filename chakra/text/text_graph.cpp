#include "text_graph.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "et_stream.h"
#include "input_error.h"
#include "proto/et_def.pb.h"

namespace opf::chakra {

namespace {

// A node that dependents can name, or none yet (the reference's `None`).
using Handle = std::optional<uint64_t>;

enum class Phase { kFwd, kIg, kWg };

// The reference's mapping: anything it does not know (NONE, lower case, typos) is ALL_REDUCE.
int64_t comm_type_value(const std::string& t) {
  if (t == "ALLREDUCE") return ChakraProtoMsg::ALL_REDUCE;
  if (t == "ALLTOALL") return ChakraProtoMsg::ALL_TO_ALL;
  if (t == "ALLGATHER") return ChakraProtoMsg::ALL_GATHER;
  if (t == "REDUCESCATTER") return ChakraProtoMsg::REDUCE_SCATTER;
  return ChakraProtoMsg::ALL_REDUCE;
}

struct LayerState {
  Handle fwd_comp, fwd_comm, ig_comp, ig_comm, wg_comp, wg_comm;
};

bool is_dlrm(Parallelism p) { return p == Parallelism::kHybridDlrm || p == Parallelism::kHybridDlrmEnhanced; }

}  // namespace

struct TextGraphBuilder::Impl {
  const TextWorkload& w;
  TextGraphOptions opt;
  std::vector<LayerState> st;
  uint64_t next_id = 0;
  uint64_t pass = 0;
  uint64_t written = 0;
  std::string buf;
  EtWriter out{buf};
  ChakraProtoMsg::Node node;
  // MODEL/hybrids: the backward index (0 = last layer) whose layer gets no IG comm; -1: none
  int64_t no_ig_comm_idx = -1;
  // DLRM: layer index B (forward joins the embedding all-to-all) and B+1 (backward sends it)
  int64_t dlrm_join = -1, dlrm_send = -1;

  Impl(const TextWorkload& wl, const TextGraphOptions& o) : w(wl), opt(o), st(wl.layers.size()) {
    const int64_t L = int64_t(w.layers.size());
    if (opt.compat_reference) {
      // the reference compares with the header's count, whatever the file holds
      const PyInt& h = w.header_layers;
      if (h.fits_i64() && h.as_i64() >= 1 && h.as_i64() <= L) no_ig_comm_idx = h.as_i64() - 1;
    } else {
      no_ig_comm_idx = L - 1;
    }
    if (is_dlrm(w.type)) setup_dlrm(L);
    if (!opt.compat_reference) report_ignored_columns();
  }

  [[noreturn]] void fail(size_t line, const std::string& problem) const {
    throw InputError(w.path + ":" + std::to_string(line), "", problem);
  }

  void setup_dlrm(int64_t L) {
    const PyInt& b = w.last_bottom_layer;
    if (opt.compat_reference) {
      if (!b.fits_i64()) return;  // matches no layer index
      int64_t v = b.as_i64();
      if (v >= 0 && v < L) dlrm_join = v;
      if (v >= -1 && v < L - 1) dlrm_send = v + 1;
      return;
    }
    if (b.huge || b.magnitude < 1 || int64_t(b.magnitude) > L - 2)
      fail(w.type_line, "last bottom layer " + b.token + " must be between 1 and the layer count minus 2 (" +
                            std::to_string(L - 2) + "): layer 0 is the embedding and a top layer must follow");
    if (w.layers[0].fwd.comm_type != "ALLTOALL")
      fail(w.layers[0].line, "the embedding layer's forward comm must be ALLTOALL, not " + w.layers[0].fwd.comm_type);
    dlrm_join = int64_t(b.magnitude);
    dlrm_send = dlrm_join + 1;
  }

  // Comm columns the type does not turn into nodes: said once per column kind, so a workload
  // written for another type does not pass silently.
  void report_ignored_columns() {
    const char* names[] = {"forward", "input-gradient", "weight-gradient"};
    size_t count[3] = {}, first_line[3] = {};
    std::string first_type[3];
    for (size_t i = 0; i < w.layers.size(); ++i) {
      const TextLayer& l = w.layers[i];
      const TextPhase* ph[] = {&l.fwd, &l.ig, &l.wg};
      for (int k = 0; k < 3; ++k) {
        if (ph[k]->comm_type == "NONE" || models(Phase(k), i, ph[k]->comm_type)) continue;
        // no input gradient leaves the first layer: its IG column is unused by design
        if (Phase(k) == Phase::kIg && i == 0 && !is_dlrm(w.type)) continue;
        if (!count[k]++) first_line[k] = l.line, first_type[k] = ph[k]->comm_type;
      }
    }
    for (int k = 0; k < 3; ++k)
      if (count[k] && opt.warn)
        opt.warn(w.path + ":" + std::to_string(first_line[k]) + ": " + names[k] + " comm " + first_type[k] +
                 " is ignored: " + w.type_name + " does not model it (" + std::to_string(count[k]) +
                 " layer line(s) like this)");
  }

  // Whether the type turns this layer's comm column into a node.
  bool models(Phase p, size_t layer, const std::string& type) const {
    switch (w.type) {
      case Parallelism::kMicro:
      case Parallelism::kData: return p == Phase::kWg;
      case Parallelism::kModel: return p == Phase::kFwd || (p == Phase::kIg && layer != 0);
      case Parallelism::kHybridDataModel:
      case Parallelism::kHybridModelData: return p != Phase::kIg || layer != 0;
      case Parallelism::kHybridDlrm:
      case Parallelism::kHybridDlrmEnhanced:
        return (p == Phase::kFwd && type == "ALLTOALL") || p == Phase::kWg || (p == Phase::kIg && layer == 0);
    }
    return false;
  }

  std::string pass_suffix() const {
    return opt.compat_reference || opt.passes <= 1 ? std::string() : "_PASS" + std::to_string(pass);
  }

  // One dependency of the node being built; `what` says what the reference would have read
  // from `None` (it crashes there, so compat mode reports it).
  struct Dep {
    Handle h;
    const char* what;
  };

  void begin(std::string name, ChakraProtoMsg::NodeType type) {
    node.Clear();
    node.set_id(next_id++);
    node.set_name(std::move(name));
    node.set_type(type);
  }

  void add_deps(std::initializer_list<Dep> deps, size_t line) {
    for (const Dep& d : deps) {
      if (!d.h) {
        if (opt.compat_reference)
          fail(line, std::string("the reference converter fails here (") + d.what +
                         " is None); the default mode converts this workload or names the problem");
        throw std::logic_error(std::string("text workload graph: missing ") + d.what);
      }
      // default mode: a NONE comm stands for its producer, which can repeat a dependency
      if (!opt.compat_reference &&
          std::find(node.data_deps().begin(), node.data_deps().end(), *d.h) != node.data_deps().end())
        continue;
      node.add_data_deps(*d.h);
    }
  }

  uint64_t finish() {
    out.write(node);
    ++written;
    return node.id();
  }

  uint64_t comp(const TextLayer& l, const char* phase, const PyInt& time, std::initializer_list<Dep> deps) {
    begin_comp(l, phase);
    add_deps(deps, l.line);
    return end_comp(l, time, phase);
  }

  // A FWD/BWD node whose dependencies are added one condition at a time between the two calls.
  void begin_comp(const TextLayer& l, const char* phase) {
    begin("COMP_NODE_" + l.name + "_" + phase + pass_suffix(), ChakraProtoMsg::COMP_NODE);
  }

  uint64_t end_comp(const TextLayer& l, const PyInt& time, const char* phase) {
    if (!time.fits_u64())  // compat only: the default reader accepts no such number
      fail(l.line, std::string(phase) + " compute time " + time.token +
                       " does not fit duration_micros (uint64); the reference fails here after opening the output");
    node.set_duration_micros(time.magnitude);
    return finish();
  }

  // A comm node fed by `producer`. Default mode: NONE makes no node and hands back the producer,
  // so dependents wait for what the comm would have waited for. `ref_name` is the layer part of
  // the reference's name (HYBRID_DATA_MODEL's IG comm adds "_IG_COMM_").
  Handle comm(const TextLayer& l, Phase phase, const TextPhase& p, Handle producer, const std::string& ref_name) {
    static const char* kPhaseTag[] = {"FWD", "IG", "WG"};
    if (!opt.compat_reference && p.comm_type == "NONE") return producer;
    std::string name = opt.compat_reference ? "COMM_COLL_NODE_" + ref_name + "_" + p.comm_type
                                            : "COMM_COLL_NODE_" + l.name + "_" + kPhaseTag[int(phase)] + "_" +
                                                  p.comm_type + pass_suffix();
    begin(std::move(name), ChakraProtoMsg::COMM_COLL_NODE);
    if (producer) node.add_data_deps(*producer);
    else if (w.type != Parallelism::kMicro) add_deps({{producer, "the input-gradient compute node"}}, l.line);
    if (!p.comm_size.fits_i64())
      fail(l.line, "comm size " + p.comm_size.token + " does not fit an int64 attribute; the reference fails here");
    auto* a = node.add_attr();
    a->set_name("comm_type");
    a->set_int64_val(comm_type_value(p.comm_type));
    a = node.add_attr();
    a->set_name("comm_size");
    a->set_int64_val(p.comm_size.as_i64());
    return finish();
  }

  Handle comm(const TextLayer& l, Phase phase, const TextPhase& p, Handle producer) {
    return comm(l, phase, p, producer, l.name);
  }

  // ---- one pass per type

  void pass_micro() {
    for (const TextLayer& l : w.layers) comm(l, Phase::kWg, l.wg, std::nullopt);
  }

  void pass_data() {
    const size_t L = w.layers.size();
    Handle last_fwd;
    for (size_t i = 0; i < L; ++i) {
      const TextLayer& l = w.layers[i];
      begin_comp(l, "FWD");
      if (i != 0) add_deps({{st[i - 1].fwd_comp, "the previous layer's FWD node"}}, l.line);
      if (st[i].wg_comm) add_deps({{st[i].wg_comm, "WG comm"}}, l.line);
      st[i].fwd_comp = last_fwd = end_comp(l, l.fwd.compute_time, "FWD");
    }
    for (size_t idx = 0; idx < L; ++idx) {
      const size_t i = L - 1 - idx;
      const TextLayer& l = w.layers[i];
      begin_comp(l, "BWD_WG");
      if (idx == 0) add_deps({{last_fwd, "fwd_comp_node"}}, l.line);
      else add_deps({{st[i + 1].ig_comp, "the next layer's BWD_IG node"}}, l.line);
      Handle wg = end_comp(l, l.wg.compute_time, "BWD_WG");
      st[i].wg_comm = comm(l, Phase::kWg, l.wg, wg);
      if (idx != L - 1) st[i].ig_comp = comp(l, "BWD_IG", l.ig.compute_time, {{wg, "BWD_WG"}});
    }
  }

  // MODEL, and with `hybrid` HYBRID_DATA_MODEL / HYBRID_MODEL_DATA (WG comms added).
  void pass_model(bool hybrid) {
    const size_t L = w.layers.size();
    const bool ig_suffix = w.type == Parallelism::kHybridDataModel;
    Handle last_fwd_comm;
    for (size_t i = 0; i < L; ++i) {
      const TextLayer& l = w.layers[i];
      begin_comp(l, "FWD");
      if (hybrid && st[i].wg_comm) add_deps({{st[i].wg_comm, "WG comm"}}, l.line);
      if (i != 0) add_deps({{st[i - 1].fwd_comm, "the previous layer's forward comm"}}, l.line);
      if (!hybrid && st[i].wg_comp) add_deps({{st[i].wg_comp, "BWD_WG"}}, l.line);
      Handle fwd = end_comp(l, l.fwd.compute_time, "FWD");
      if (!hybrid) st[i].fwd_comp = fwd;
      st[i].fwd_comm = last_fwd_comm = comm(l, Phase::kFwd, l.fwd, fwd);
    }
    for (size_t idx = 0; idx < L; ++idx) {
      const size_t i = L - 1 - idx;
      const TextLayer& l = w.layers[i];
      begin_comp(l, "BWD_IG");
      if (idx == 0) {
        add_deps({{last_fwd_comm, "fwd_comm_node"}}, l.line);
      } else {
        add_deps({{st[i + 1].wg_comp, "the next layer's BWD_WG node"},
                  {st[i + 1].ig_comm,
                   "the next layer's input-gradient comm (the header's layer count is smaller "
                   "than the file's)"}},
                 l.line);
      }
      Handle ig = end_comp(l, l.ig.compute_time, "BWD_IG");
      if (int64_t(idx) != no_ig_comm_idx)
        st[i].ig_comm = comm(l, Phase::kIg, l.ig, ig, ig_suffix ? l.name + "_IG_COMM_" : l.name);
      st[i].wg_comp = comp(l, "BWD_WG", l.wg.compute_time, {{ig, "BWD_IG"}});
      if (hybrid) st[i].wg_comm = comm(l, Phase::kWg, l.wg, st[i].wg_comp);
    }
  }

  void pass_dlrm() {
    const size_t L = w.layers.size();
    Handle last_fwd;
    for (size_t i = 0; i < L; ++i) {
      const TextLayer& l = w.layers[i];
      begin_comp(l, "FWD");
      if (st[i].wg_comm) add_deps({{st[i].wg_comm, "WG comm"}}, l.line);
      else if (st[i].wg_comp) add_deps({{st[i].wg_comp, "BWD_WG"}}, l.line);
      if (i != 0) add_deps({{st[i - 1].fwd_comp, "the previous layer's FWD node"}}, l.line);
      if (int64_t(i) == dlrm_join)
        add_deps({{st[0].fwd_comm,
                   "the embedding layer's forward all-to-all (last bottom layer 0, or a layer-0 "
                   "forward comm other than ALLTOALL)"}},
                 l.line);
      Handle fwd = end_comp(l, l.fwd.compute_time, "FWD");
      st[i].fwd_comp = last_fwd = fwd;
      if (l.fwd.comm_type == "ALLTOALL") st[i].fwd_comm = comm(l, Phase::kFwd, l.fwd, fwd);
    }
    for (size_t idx = 0; idx < L; ++idx) {
      const size_t i = L - 1 - idx;
      const TextLayer& l = w.layers[i];
      begin_comp(l, "BWD_WG");
      if (idx == 0) {
        add_deps({{last_fwd, "fwd_comp_node"}}, l.line);
      } else {
        if (st[i + 1].ig_comp) add_deps({{st[i + 1].ig_comp, "BWD_IG"}}, l.line);
        if (st[i].ig_comm) add_deps({{st[i].ig_comm, "embedding all-to-all"}}, l.line);
      }
      Handle wg = end_comp(l, l.wg.compute_time, "BWD_WG");
      st[i].wg_comp = wg;
      // the reference skips exactly "NONE" here (and so does the default mode's comm())
      if (l.wg.comm_type != "NONE") st[i].wg_comm = comm(l, Phase::kWg, l.wg, wg);
      Handle ig;
      if (idx != L - 1) ig = st[i].ig_comp = comp(l, "BWD_IG", l.ig.compute_time, {{wg, "BWD_WG"}});
      if (int64_t(i) == dlrm_send) {
        const TextLayer& emb = w.layers[0];
        if (opt.compat_reference && !ig) {
          // the reference names the node first, then fails on the missing BWD_IG
          fail(l.line, "the reference converter fails here (bwd_ig_comp_node is None: last bottom layer -1)");
        }
        st[0].ig_comm = comm(emb, Phase::kIg, emb.ig, ig);
      }
    }
  }

  // What the reference forgets after each NPU (everything else carries over).
  void reset_after_npu() {
    for (LayerState& s : st) {
      switch (w.type) {
        case Parallelism::kMicro: break;
        case Parallelism::kData: s.wg_comm.reset(); break;
        case Parallelism::kModel: s.wg_comp.reset(); break;
        case Parallelism::kHybridDataModel:
        case Parallelism::kHybridModelData: s.wg_comm.reset(); break;
        case Parallelism::kHybridDlrm:
        case Parallelism::kHybridDlrmEnhanced:
          s.wg_comm.reset(), s.wg_comp.reset(), s.ig_comm.reset(), s.ig_comp.reset();
          break;
      }
    }
  }

  std::string build() {
    buf.clear();
    written = 0;
    if (!opt.compat_reference) {
      next_id = 0;
      st.assign(w.layers.size(), LayerState{});
    }
    ChakraProtoMsg::GlobalMetadata gm;
    auto* a = gm.add_attr();
    a->set_name("schema");
    a->set_string_val("1.0.2-chakra.1.0.0");
    a = gm.add_attr();
    a->set_name("input_file");
    a->set_string_val(w.input_text);
    out.write(gm);
    for (pass = 0; pass < opt.passes; ++pass) {
      switch (w.type) {
        case Parallelism::kMicro: pass_micro(); break;
        case Parallelism::kData: pass_data(); break;
        case Parallelism::kModel: pass_model(false); break;
        case Parallelism::kHybridDataModel:
        case Parallelism::kHybridModelData: pass_model(true); break;
        case Parallelism::kHybridDlrm:
        case Parallelism::kHybridDlrmEnhanced: pass_dlrm(); break;
      }
    }
    reset_after_npu();
    return buf;
  }
};

TextGraphBuilder::TextGraphBuilder(const TextWorkload& w, const TextGraphOptions& opt)
    : impl_(std::make_unique<Impl>(w, opt)) {}
TextGraphBuilder::~TextGraphBuilder() = default;
std::string TextGraphBuilder::build_npu() { return impl_->build(); }
uint64_t TextGraphBuilder::nodes_written() const { return impl_->written; }

}  // namespace opf::chakra
