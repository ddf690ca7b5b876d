// libFuzzer target: the build-matrix TOML reader (opforge matrix), against the repo's options and manifest. Built with
// -Dfuzz=enabled (clang); run by `meson test --suite fuzz`.
#include <cstddef>
#include <cstdint>
#include <string>

#include "matrix/matrix_spec.h"
#include "matrix/meson_options.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The option catalog comes from meson introspection of the source tree: once per process.
  static const opf::matrix::OptionCatalog catalog = opf::matrix::OptionCatalog::introspect(OPF_FUZZ_SOURCE_ROOT);
  static const opf::matrix::OpManifest manifest =
      opf::matrix::OpManifest::read(OPF_FUZZ_SOURCE_ROOT "/kernels/manifest.toml");
  const std::string origin = "fuzz.toml";
  try {
    (void)opf::matrix::parse_matrix(std::string(reinterpret_cast<const char*>(data), size), origin, catalog, manifest);
  } catch (const opf::Error& e) {
    opf::fuzz::check_error(e, origin);
  }
  return 0;
}
