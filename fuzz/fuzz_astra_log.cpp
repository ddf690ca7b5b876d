// libFuzzer target: the ASTRA-sim log reader (opforge chakra timeline --log), both modes. Built with -Dfuzz=enabled
// (clang); run by `meson test --suite fuzz`.
#include <cstddef>
#include <cstdint>
#include "astra_log.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = opf::fuzz::write_scratch(data, size, ".log");
  try {
    (void)opf::chakra::read_astra_log(path);
  } catch (const opf::Error& e) {
    opf::fuzz::check_error(e, path);
  }
  try {
    (void)opf::chakra::read_astra_log_reference(path);
  } catch (const opf::Error& e) {
    opf::fuzz::check_error(e, path);
  }
  return 0;
}
