// libFuzzer target: the .et stream reader, then the validator and the simulator on what it read. Built with
// -Dfuzz=enabled (clang); run by `meson test --suite fuzz`.
#include <cstddef>
#include <cstdint>
#include "et_load.h"
#include "validator.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = opf::fuzz::write_scratch(data, size, ".et");
  for (bool compat : {false, true}) {
    try {
      opf::chakra::LoadedEt et;
      opf::chakra::load_et(path, compat, et);
    } catch (const opf::Error& e) {
      opf::fuzz::check_error(e, path);
    }
  }
  return 0;
}
