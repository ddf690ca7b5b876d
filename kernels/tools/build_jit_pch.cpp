// Builds the CPU JIT's precompiled header bundle (core/cpu_jit.h) at build time, with the command
// line the loader itself uses, so the two cannot drift apart.
//   opf_build_jit_pch <header.in> <header.out> <depfile> <depfile target>
#include <cstdio>

#include "core/cpu_jit.h"
#include "opforge/error.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: opf_build_jit_pch <header.in> <header.out> <depfile> <depfile target>\n");
    return 2;
  }
  try {
    opf::detail::cpu_jit::build_pch(argv[1], argv[2], argv[3], argv[4]);
    return 0;
  } catch (const opf::Error& e) {
    std::fprintf(stderr, "opf_build_jit_pch: %s\n", e.what());
    return 1;
  }
}
