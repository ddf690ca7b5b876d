// Building an ABI call (abi.h) from C++: tensors and params by their manifest names, checked
// against the op's entry before anything runs. Used by the suites, `opforge op` and op tests;
// downstream C++ code can use it the same way:
//   opf::CallBuilder b(*opf::find_op("layer_norm"), "forward");
//   b.add("x", x, DType::f32, {rows, cols}).add("gamma", ...)...;  b.param("eps", 1e-6);
//   b.run(opf::Loader::instance().load(op, "cpu").info);
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "opforge/abi.h"
#include "opforge/manifest.h"

namespace opf {

// Row-major contiguous strides (in elements) of a shape.
Shape contiguous_strides(const Shape& shape);

class CallBuilder {
 public:
  CallBuilder(const OpInfo& op, std::string_view entry);  // params start at their defaults
  CallBuilder(const CallBuilder&) = delete;
  CallBuilder& operator=(const CallBuilder&) = delete;

  // Appends one tensor to argument `arg` (a list argument: once per element, in order).
  // strides empty = contiguous. Throws opf::Error for an unknown argument, too many dims, or a
  // second tensor for a non-list argument.
  CallBuilder& add(std::string_view arg, void* data, DType dtype, const Shape& shape, const Shape& strides = {});
  // Marks a list argument present with no elements (an empty list).
  CallBuilder& empty_list(std::string_view arg);
  // Sets a param; throws opf::Error naming it when the value is outside its range or type.
  CallBuilder& param(std::string_view name, double value);
  CallBuilder& params(const Params& p);
  CallBuilder& threads(int n);  // CPU threads for this call; 0 = the default (OPFORGE_NUM_THREADS)
  CallBuilder& stream(void* s);

  // The call; throws opf::Error naming the first argument with no tensor.
  const opf_call& abi();
  // "" when the module computes this call, else its one-line reason.
  std::string supports(const opf_module_info* module);
  // Runs the call; throws opf::Error "<op>/<backend> <entry>: <module's reason>".
  void run(const opf_module_info* module);
  const EntryInfo& entry() const { return *entry_; }

 private:
  const OpInfo& op_;
  const EntryInfo* entry_;
  std::vector<std::vector<opf_tensor>> tensors_;  // per manifest argument
  std::vector<bool> given_;
  std::vector<opf_arg> args_;
  std::vector<opf_param> params_;
  opf_call call_{};
  int threads_ = 0;
  void* stream_ = nullptr;
};

}  // namespace opf
