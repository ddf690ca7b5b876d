// `opforge chakra from-text`: an ASTRA-sim text workload -> PREFIX.<npu>.et for each NPU.
// All files appear together or none does: every NPU's file is written to a temp file first and
// the renames happen only after the last one is complete. Existing files of the same names are
// replaced, as `chakra convert` replaces its output.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace opf::chakra {

struct FromTextOptions {
  uint64_t npus = 1;
  uint64_t passes = 1;
  bool compat_reference = false;
  std::function<void(const std::string&)> warn;  // default: stderr
};

struct FromTextStats {
  uint64_t files = 0;
  uint64_t nodes_per_file = 0;  // of the last file
};

// Throws InputError ("FILE:LINE: problem") for bad input or options; nothing is written then.
FromTextStats from_text(const std::string& workload, const std::string& prefix, const FromTextOptions& opt);

}  // namespace opf::chakra
