// A drawn case copied onto a backend's Device, ready to run through a module's ABI (built with
// opforge/call.h from the case's arguments and params). Every tensor is followed by guard bytes,
// so a kernel writing past an argument is caught.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "case_data.h"
#include "opforge/call.h"
#include "opforge/loader.h"

namespace opf::suites {

class StagedCase {
 public:
  // threads: CPU threads for every call (0 = OPFORGE_NUM_THREADS / all cores).
  StagedCase(Device& dev, const OpInfo& op, const DrawnCase& c, int threads = 0);
  ~StagedCase();
  StagedCase(const StagedCase&) = delete;
  StagedCase& operator=(const StagedCase&) = delete;

  // "" when the module computes this case, else its one-line reason (abi.h: supports).
  std::string supports(const opf_module_info* module);
  // One call of the module's entry; throws opf::Error with the module's one-line reason.
  void run(const opf_module_info* module);
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
  std::unique_ptr<CallBuilder> call_;
};

}  // namespace opf::suites
