// libFuzzer target: the .npy reader (opforge op --in), in memory. Built with -Dfuzz=enabled (clang); run by `meson test
// --suite fuzz`.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "npy.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string origin = "fuzz.npy";
  try {
    opf::npy::Array a = opf::npy::parse(std::string_view(reinterpret_cast<const char*>(data), size), origin);
    // what was accepted must survive a round trip
    opf::npy::Array b = opf::npy::parse(opf::npy::serialize(a), origin);
    if (b.shape != a.shape || b.data != a.data || b.dtype != a.dtype) __builtin_trap();
  } catch (const opf::Error& e) {
    opf::fuzz::check_error(e, origin);
  }
  return 0;
}
