// Internal: the multi-tensor apply table of a GPU call (gpu/launch_abi.h, "Lists"): the generic
// launcher checks a list entry's call, cuts every tensor of its lists into chunks and uploads this
// table, so one launch covers every tensor and optimizers need no host code of their own.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "gpu/launch_abi.h"
#include "opforge/abi.h"
#include "opforge/dtype.h"
#include "opforge/manifest.h"

namespace opf::detail {

static_assert(OPF_F32 == 0 && OPF_F16 == 1 && OPF_BF16 == 2, "gpu/multi_tensor.cuh's ListDtype codes");

// Bit i set: argument i of the entry is a list.
inline unsigned gpu_list_mask(const EntryInfo& e) {
  unsigned m = 0;
  for (size_t i = 0; i < e.args.size() && i < 32; ++i)
    if (e.args[i].list) m |= 1u << i;
  return m;
}

class GpuListTable {
 public:
  // Checks the call's lists (equal lengths, tensor k of one size in every list, dense, dtypes by
  // the manifest's rules with storage dtype t; an element may have any shape, as in apex) and cuts
  // them into chunks of `chunk` elements. "" on success, else the problem.
  std::string build(const EntryInfo& e, const opf_call* c, DType t, long long chunk) {
    head_ = opf_gpu_lists{};
    tensors_.clear();
    chunk_tensor_.clear();
    if (chunk < 1) return "the plan's chunk is " + std::to_string(chunk);
    head_.chunk = chunk;
    long long n = -1;
    for (size_t i = 0; i < e.args.size(); ++i) {
      if (!e.args[i].list) continue;
      if (head_.nlists == OPF_GPU_MAX_LISTS) return "more than " + std::to_string(OPF_GPU_MAX_LISTS) + " lists";
      const opf_arg& arg = c->args[i];
      if (arg.count < 0 || (arg.count > 0 && !arg.tensors)) return "list '" + e.args[i].name + "' is malformed";
      if (n >= 0 && arg.count != n)
        return "list '" + e.args[i].name + "' has " + std::to_string(arg.count) + " tensors, the first list " +
               std::to_string(n);
      n = arg.count;
      if (tensors_.empty()) tensors_.resize(size_t(n));
      const DType want = e.args[i].dtype_for(t);
      const int j = head_.nlists++;
      head_.list_arg[j] = int(i);
      head_.dtype[j] = int(want);
      for (long long k = 0; k < n; ++k) {
        const opf_tensor& x = arg.tensors[k];
        const std::string who = "'" + e.args[i].name + "'[" + std::to_string(k) + "]";
        if (x.dtype != int32_t(want)) return who + " must be " + std::string(dtype_name(want));
        if (x.ndim < 0 || x.ndim > OPF_MAX_DIMS) return who + " has " + std::to_string(x.ndim) + " dims";
        long long numel = 1;
        for (int d = x.ndim - 1; d >= 0; --d) {
          if (x.shape[d] < 0) return who + " has a negative dim";
          if (x.shape[d] > 1 && x.strides[d] != numel) return who + " is not contiguous";
          numel *= x.shape[d];
        }
        if (numel > 0 && !x.data) return who + " has no data";
        opf_gpu_list_tensor& slot = tensors_[size_t(k)];
        if (j == 0) slot.numel = numel;
        else if (slot.numel != numel)
          return who + " has " + std::to_string(numel) + " elements, '" + e.args[size_t(head_.list_arg[0])].name +
                 "'[" + std::to_string(k) + "] " + std::to_string(slot.numel);
        slot.ptr[j] = x.data;
      }
    }
    for (size_t k = 0; k < tensors_.size(); ++k) {
      tensors_[k].first_chunk = (long long)chunk_tensor_.size();
      for (long long b = 0; b < tensors_[k].numel; b += chunk) {
        if (chunk_tensor_.size() >= 0x7fffffffu) return "more than 2^31 chunks";
        chunk_tensor_.push_back(int(k));
      }
    }
    head_.ntensors = (long long)tensors_.size();
    head_.nchunks = (long long)chunk_tensor_.size();
    return "";
  }

  long long ntensors() const { return head_.ntensors; }
  long long nchunks() const { return head_.nchunks; }

  // Bytes of the table in device memory (a multiple of 256, so what follows stays aligned).
  size_t bytes() const { return align(tensors_offset() + tensors_bytes() + chunk_tensor_.size() * sizeof(int)); }

  // The table as it must lie at device address `base`: its pointers point into it.
  std::vector<unsigned char> image(void* base) const {
    std::vector<unsigned char> out(bytes(), 0);
    opf_gpu_lists h = head_;
    auto* b = static_cast<unsigned char*>(base);
    h.tensor = reinterpret_cast<const opf_gpu_list_tensor*>(b + tensors_offset());
    h.chunk_tensor = reinterpret_cast<const int*>(b + tensors_offset() + tensors_bytes());
    std::memcpy(out.data(), &h, sizeof h);
    if (!tensors_.empty()) std::memcpy(out.data() + tensors_offset(), tensors_.data(), tensors_bytes());
    if (!chunk_tensor_.empty())
      std::memcpy(out.data() + tensors_offset() + tensors_bytes(), chunk_tensor_.data(),
                  chunk_tensor_.size() * sizeof(int));
    return out;
  }

 private:
  static size_t align(size_t n) { return (n + 255) & ~size_t(255); }
  static size_t tensors_offset() { return (sizeof(opf_gpu_lists) + 15) & ~size_t(15); }
  size_t tensors_bytes() const { return tensors_.size() * sizeof(opf_gpu_list_tensor); }

  opf_gpu_lists head_{};
  std::vector<opf_gpu_list_tensor> tensors_;
  std::vector<int> chunk_tensor_;
};

}  // namespace opf::detail
