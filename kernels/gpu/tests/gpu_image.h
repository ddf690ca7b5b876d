// Test helper: reads GPU code objects without a GPU or vendor tools (this machine has no cuobjdump):
// CUDA fatbins, clang offload bundles (hipcc --genco) and the ELF images inside them. Lets tests
// check that an artefact targets the right arch and carries every kernel and plan the launcher
// will look up.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "opforge/manifest.h"

namespace opf::test {

struct ElfSymbol {
  bool function = false;  // STT_FUNC (kernels), else data (plans)
  std::string bytes;      // the symbol's initial contents (data symbols with file contents)
};

struct ElfImage {
  int machine = 0;   // EM_CUDA (190) or EM_AMDGPU (224)
  std::string arch;  // "sm_90" / "gfx90a"
  std::map<std::string, ElfSymbol> symbols;
};

// Throws opf::Error (one line) when the bytes are not a well-formed 64-bit ELF.
ElfImage parse_elf(const std::string& bytes);

struct Embedded {
  std::string what;   // fatbin: "elf sm_90" / "ptx sm_90"; bundle: the target triple
  std::string bytes;  // ELF entries only (empty for compressed or non-ELF payloads)
};
std::vector<Embedded> fatbin_entries(const std::string& bytes);
std::vector<Embedded> offload_bundle_entries(const std::string& bytes);

// Everything the generic launcher needs from an image of `op`, as a list of problems:
// a valid <op>_<entry>_plan per entry, and <op>_<entry>_<dtype>[_s<k>] for every stage and dtype.
std::vector<std::string> launch_problems(const ElfImage& image, const OpInfo& op);

std::string read_file(const std::string& path);

}  // namespace opf::test
