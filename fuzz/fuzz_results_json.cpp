// libFuzzer target: the results/baseline JSON readers (opforge gate, merge). Built with -Dfuzz=enabled (clang); run by
// `meson test --suite fuzz`.
#include <cstddef>
#include <cstdint>
#include <string>

#include "matrix/gate_input.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = opf::fuzz::write_scratch(data, size, ".json");
  try {
    (void)opf::matrix::read_gate_input(path);
  } catch (const opf::Error& e) {
    opf::fuzz::check_error(e, path);
  }
  try {
    (void)opf::matrix::read_benchmark_json(path, "cell");
  } catch (const opf::Error& e) {
    opf::fuzz::check_error(e, path);
  }
  try {
    (void)opf::matrix::read_chakra_json(path, "cell");
  } catch (const opf::Error& e) {
    opf::fuzz::check_error(e, path);
  }
  try {
    (void)opf::matrix::read_callgrind_json(path, "cell");
  } catch (const opf::Error& e) {
    opf::fuzz::check_error(e, path);
  }
  return 0;
}
