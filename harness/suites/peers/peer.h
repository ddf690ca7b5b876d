// Peer libraries benchmarked beside our kernels, under `peer/<lib>/<op>/<dtype>/<entry>/<shape>`.
// An op lists its peers in the manifest (`peers = ["onednn"]`); each (lib, op) pair is one adapter
// file in the op's folder (`kernels/ops/<op>/peer_<lib>.cpp`) that registers itself with
// OPF_PEER_ADAPTER. Meson compiles an adapter only when its library is found, so a manifest peer
// without a built adapter is reported, not an error. `unfused` adapters need no library: they
// compute the op one elementwise pass at a time, as PyTorch eager does.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "../case_data.h"

namespace opf::suites::peers {

// One peer call set up for one case; run() does one complete call and waits for it.
class PeerRun {
 public:
  virtual ~PeerRun() = default;
  virtual void run() = 0;
  // After run(): the peer's value of our output argument `name` (in our terms, e.g. rstd rather
  // than oneDNN's variance), so the correctness suite can check that the adapter computes the
  // same op we benchmark it against. False when the peer has no such output.
  virtual bool output(std::string_view name, std::vector<double>& out) const = 0;
  // The same for element list_index of a list argument (ArgDesc::list_index; -1: a tensor
  // argument, answered by output(name, out)). Adapters of ops with list outputs override it.
  virtual bool output(std::string_view name, int list_index, std::vector<double>& out) const {
    return list_index < 0 && output(name, out);
  }
  // A GPU peer (Adapter::backend): puts one call's work on the device's default stream without
  // waiting, so the benchmark times it with the device's events, as it times our GPU kernels.
  virtual void enqueue() { run(); }
};

struct PeerCase {
  std::string_view entry;
  DType dtype;
  const Shape& shape;
  const Params& params;
  int threads = 1;  // the peer runs with this many threads (the benchmark's thread count)
};

struct Adapter {
  std::string lib, op;
  // Empty when the peer computes this case; otherwise why not (cheap: no data touched).
  std::string (*unsupported)(const PeerCase& c) = nullptr;
  // Sets up the peer's buffers from the drawn case (our inputs, in our dtypes).
  std::unique_ptr<PeerRun> (*make)(const PeerCase& c, const DrawnCase& drawn) = nullptr;
  // "" for a host peer (host memory, the benchmark's thread count); else the GPU backend it runs
  // on: benchmarked at one host thread beside our kernels on that backend only.
  std::string backend;
  // Non-null for a peer that times a part of the op without computing it (e.g. the GEMMs without
  // their epilogues): why it is never cross-checked against the reference.
  const char* timing_only = nullptr;
};

// OPF_PEER_ADAPTER's arguments as an Adapter (backend and timing_only optional).
inline Adapter adapter(std::string lib, std::string op, std::string (*unsupported)(const PeerCase&),
                       std::unique_ptr<PeerRun> (*make)(const PeerCase&, const DrawnCase&), std::string backend = "",
                       const char* timing_only = nullptr) {
  Adapter a;
  a.lib = std::move(lib), a.op = std::move(op), a.unsupported = unsupported, a.make = make;
  a.backend = std::move(backend), a.timing_only = timing_only;
  return a;
}

const std::vector<Adapter>& adapters();
const Adapter* find_adapter(std::string_view lib, std::string_view op);

struct Registration {
  explicit Registration(Adapter a);
};

}  // namespace opf::suites::peers

#define OPF_PEER_ADAPTER(ident, ...)                                              \
  static const ::opf::suites::peers::Registration opf_peer_registration_##ident { \
    ::opf::suites::peers::adapter(__VA_ARGS__)                                    \
  }
