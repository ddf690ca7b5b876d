// libFuzzer target: the ASTRA-sim text workload reader (opforge chakra from-text). Built with -Dfuzz=enabled (clang);
// run by `meson test --suite fuzz`.
#include <cstddef>
#include <cstdint>
#include "text_workload.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = opf::fuzz::write_scratch(data, size, ".txt");
  for (bool compat : {false, true}) {
    try {
      opf::chakra::TextReadOptions opt;
      opt.compat_reference = compat;
      opt.warn = [](const std::string&) {};
      (void)opf::chakra::read_text_workload(path, opt);
    } catch (const opf::Error& e) {
      opf::fuzz::check_error(e, path);
    }
  }
  return 0;
}
