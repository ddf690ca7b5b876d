// What every kernels/ops/<op>/peer_torch.cpp shares: PyTorch eager on the CPU (libtorch 1.13,
// ATen called directly, as the Python ops dispatch to it) as a peer of one op.
//
// Buffers: the drawn case's bytes are copied once, when the run is set up, into buffers the
// adapter owns (it overwrites inouts), and wrapped with at::from_blob: the timed run() copies
// nothing that PyTorch eager would not copy. Outputs and temporaries are what the eager ops
// allocate at each call (functional ATen ops, as Python calls them), from a cache of freed
// blocks (caching_allocator.h: without it page faults, not torch, would be measured). Threads: ATen's intra-op pool at
// the benchmark's thread count (at::set_num_threads). A case torch has no CPU kernel for (1.13: no f16 layer_norm or
// softmax) is found by running the adapter once on a tiny case and reported as unsupported with torch's own message,
// never as a failure.
#pragma once

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/from_blob.h>
#include <c10/util/Exception.h>
#include <torch/csrc/api/include/torch/version.h>

#include <cstddef>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "caching_allocator.h"
#include "opforge/error.h"
#include "peers/peer.h"

namespace opf::suites::peers::torch_peer {

inline at::ScalarType scalar_type(DType t) {
  switch (t) {
    case DType::f32: return at::kFloat;
    case DType::f16: return at::kHalf;
    case DType::bf16: return at::kBFloat16;
    case DType::f64: return at::kDouble;
    case DType::u8: return at::kByte;
    case DType::i32: return at::kInt;
    case DType::i64: return at::kLong;
  }
  throw Error("torch peer: no torch dtype for " + std::string(dtype_name(t)));
}

// The arguments of one drawn case as tensors over buffers this object owns.
class Buffers {
 public:
  explicit Buffers(const DrawnCase& d) : d_(d) {}

  // Argument `name` (element `list_index` of a list) in its own dtype, shaped `shape` (default:
  // its ArgDesc shape). as: reinterpret the bytes as another dtype of the same size (u8 masks
  // holding 0/1 as kBool).
  at::Tensor arg(std::string_view name, int list_index = -1, std::vector<int64_t> shape = {},
                 c10::optional<at::ScalarType> as = c10::nullopt) {
    const HostArg& h = host(name, list_index);
    if (shape.empty()) shape = h.desc->shape;
    if (shape.empty()) shape = {1};
    auto& bytes = owned_.emplace_back(h.bytes);
    return at::from_blob(bytes.data(), shape, at::TensorOptions().dtype(as.value_or(scalar_type(h.desc->dtype))));
  }

  // Number of elements of list argument `name` in this case.
  int list_size(std::string_view name) const {
    int n = 0;
    for (const HostArg& h : d_.host)
      if (h.desc->name == name && h.desc->list_index >= 0) ++n;
    return n;
  }

  const HostArg& host(std::string_view name, int list_index = -1) const {
    for (const HostArg& h : d_.host)
      if (h.desc->name == name && h.desc->list_index == list_index) return h;
    throw Error("torch peer: the case has no argument '" + std::string(name) + "'" +
                (list_index >= 0 ? "[" + std::to_string(list_index) + "]" : ""));
  }

 private:
  const DrawnCase& d_;
  std::deque<std::vector<std::byte>> owned_;  // deque: growing it never moves a wrapped buffer
};

// A tensor's values as doubles, in row-major order (for PeerRun::output).
inline void to_doubles(const at::Tensor& t, std::vector<double>& out) {
  const at::Tensor d = t.to(at::kDouble).contiguous();
  out.resize(size_t(d.numel()));
  std::memcpy(out.data(), d.data_ptr<double>(), out.size() * sizeof(double));
}

// A torch error as one line: its message without the C++ backtrace.
inline std::string message(const c10::Error& e) {
  std::string m = e.what_without_backtrace();
  if (size_t nl = m.find('\n'); nl != std::string::npos) m.resize(nl);
  return m;
}

// unsupported() of an adapter, after its shape rules: one run of `make` on `tiny` (a small shape
// of the same rank), cached per (op, entry, dtype), tells whether torch has CPU kernels for it.
inline std::string probe(const PeerCase& c, std::string_view op_name, const Shape& tiny,
                         std::unique_ptr<PeerRun> (*make)(const PeerCase&, const DrawnCase&)) {
  static std::map<std::string, std::string> cache;
  const std::string key = std::string(op_name) + "/" + std::string(c.entry) + "/" + std::string(dtype_name(c.dtype));
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  const OpInfo* op = find_op(op_name);
  if (!op) throw Error("torch peer: no op '" + std::string(op_name) + "'");
  std::string why;
  try {
    const DrawnCase d = draw_case(*op, c.entry, c.dtype, tiny, Variant::random, 1, false);
    const PeerCase small{c.entry, c.dtype, tiny, c.params, 1};
    make(small, d)->run();
  } catch (const c10::Error& e) {
    why = "torch " TORCH_VERSION " on the CPU: " + message(e);
  }
  return cache[key] = why;
}

// ATen's intra-op threads for a run, the benchmark's thread count.
// Every adapter's Run constructor calls it, before any torch call: also installs the allocator
// (and empties its cache).
inline void use_threads(int threads) {
  CachingCpuAllocator::install();
  at::set_num_threads(threads > 0 ? threads : 1);
}

}  // namespace opf::suites::peers::torch_peer
