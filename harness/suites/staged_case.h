// A drawn case copied onto a backend's Device, ready to run through a module's ABI.
// Every tensor is followed by guard bytes, so a kernel writing past an argument is caught.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "case_data.h"
#include "opforge/loader.h"

namespace opf::suites {

class StagedCase {
 public:
  StagedCase(Device& dev, const DrawnCase& c, const Params& params);
  ~StagedCase();
  StagedCase(const StagedCase&) = delete;
  StagedCase& operator=(const StagedCase&) = delete;

  // One call of the module's entry; throws opf::Error with the module's one-line reason.
  void run(const opf_module_info* module, std::string_view entry);
  void synchronize() { dev_.synchronize(); }
  // Copies argument i back to the host, in its dtype.
  std::vector<std::byte> fetch(size_t i) const;
  // Arguments whose guard bytes were overwritten.
  std::vector<std::string> overrun_args() const;
  // Re-uploads the original inout values (benchmarks: repeated runs must not feed on their output).
  void restore_inouts();
  bool has_inouts() const;

 private:
  static constexpr size_t kGuard = 64;
  Device& dev_;
  const DrawnCase& case_;
  std::vector<void*> ptrs_;
  std::vector<opf_tensor> tensors_;
  std::vector<double> params_;
  std::string entry_;
};

}  // namespace opf::suites
