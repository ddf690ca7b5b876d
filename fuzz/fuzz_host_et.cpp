// libFuzzer target: the host ET / linked JSON reader (opforge chakra convert's input). Built with -Dfuzz=enabled
// (clang); run by `meson test --suite fuzz`.
#include <cstddef>
#include <cstdint>
#include "host_et.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = opf::fuzz::write_scratch(data, size, ".json");
  try {
    opf::chakra::ReadOptions opt;
    opt.parser_threads = 1;
    (void)opf::chakra::read_host_et(path, opt);
  } catch (const opf::Error& e) {
    opf::fuzz::check_error(e, path);
  }
  return 0;
}
