// libFuzzer target: the Kineto trace reader (opforge chakra link's device-side input). Built with -Dfuzz=enabled
// (clang); run by `meson test --suite fuzz`.
#include <cstddef>
#include <cstdint>
#include "kineto_trace.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = opf::fuzz::write_scratch(data, size, ".json");
  try {
    (void)opf::chakra::read_kineto_trace(path);
  } catch (const opf::Error& e) {
    opf::fuzz::check_error(e, path);
  }
  return 0;
}
