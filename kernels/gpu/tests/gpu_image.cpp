#include "gpu_image.h"

#include <elf.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "core/gpu_module.h"
#include "opforge/error.h"

namespace opf::test {
namespace {

template <class T>
T read_at(const std::string& b, size_t off, const char* what) {
  if (off > b.size() || b.size() - off < sizeof(T)) throw Error(std::string("truncated image: ") + what);
  T v;
  std::memcpy(&v, b.data() + off, sizeof v);
  return v;
}

#ifndef EM_CUDA
#define EM_CUDA 190
#endif
#ifndef EM_AMDGPU
#define EM_AMDGPU 224
#endif

// AMDGPU e_flags EF_AMDGPU_MACH values (LLVM AMDGPUUsage) for the archs opforge targets.
std::string amdgpu_mach_name(unsigned mach) {
  switch (mach) {
    case 0x2c: return "gfx900";
    case 0x2f: return "gfx906";
    case 0x30: return "gfx908";
    case 0x3f: return "gfx90a";
    case 0x40: return "gfx940";
    case 0x36: return "gfx1030";
  }
  return "amdgpu-mach-0x" + std::to_string(mach);
}

}  // namespace

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

ElfImage parse_elf(const std::string& b) {
  const auto eh = read_at<Elf64_Ehdr>(b, 0, "ELF header");
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) throw Error("not an ELF image");
  if (eh.e_ident[EI_CLASS] != ELFCLASS64) throw Error("not a 64-bit ELF image");
  ElfImage img;
  img.machine = eh.e_machine;
  if (eh.e_machine == EM_CUDA) {
    // CUDA 12.8+ cubins (ELF ABI version 8) keep the SM in bits 8..15; older ones in bits 0..7.
    const unsigned sm = eh.e_ident[EI_ABIVERSION] >= 8 ? (eh.e_flags >> 8) & 0xff : eh.e_flags & 0xff;
    img.arch = "sm_" + std::to_string(sm);
  } else if (eh.e_machine == EM_AMDGPU) {
    img.arch = amdgpu_mach_name(eh.e_flags & 0xff);
  }
  std::vector<Elf64_Shdr> sh(eh.e_shnum);
  for (size_t i = 0; i < sh.size(); ++i)
    sh[i] = read_at<Elf64_Shdr>(b, eh.e_shoff + i * eh.e_shentsize, "section header");
  for (const auto& s : sh) {
    if (s.sh_type != SHT_SYMTAB) continue;
    if (s.sh_link >= sh.size()) throw Error("symbol table links to a missing string table");
    const Elf64_Shdr& strtab = sh[s.sh_link];
    for (size_t off = 0; off + sizeof(Elf64_Sym) <= s.sh_size; off += sizeof(Elf64_Sym)) {
      const auto sym = read_at<Elf64_Sym>(b, s.sh_offset + off, "symbol");
      const int type = ELF64_ST_TYPE(sym.st_info);
      if (type != STT_FUNC && type != STT_OBJECT) continue;
      if (sym.st_name >= strtab.sh_size) throw Error("symbol name out of range");
      const char* name = b.data() + strtab.sh_offset + sym.st_name;
      ElfSymbol e;
      e.function = type == STT_FUNC;
      if (!e.function && sym.st_shndx < sh.size() && sh[sym.st_shndx].sh_type != SHT_NOBITS) {
        const Elf64_Shdr& sec = sh[sym.st_shndx];
        // Relocatable images (cubin) give section offsets, executables (AMDGPU) addresses.
        const uint64_t rel =
            eh.e_type == ET_REL || sym.st_value < sec.sh_addr ? sym.st_value : sym.st_value - sec.sh_addr;
        if (rel + sym.st_size <= sec.sh_size && sec.sh_offset + rel + sym.st_size <= b.size())
          e.bytes.assign(b.data() + sec.sh_offset + rel, sym.st_size);
      }
      img.symbols[name] = e;
    }
  }
  return img;
}

// Fatbin layout (what nvcc 12/13 write): header {u32 magic 0xBA55ED50, u16 version, u16 header
// size, u64 payload size}, then entries {u16 kind (1 PTX, 2 ELF), u16, u32 header size, u64 size,
// ..., u32 sm at +28, ...} each followed by its payload. PTX is compressed by default; ELF is not.
std::vector<Embedded> fatbin_entries(const std::string& b) {
  if (read_at<uint32_t>(b, 0, "fatbin header") != 0xBA55ED50u) throw Error("not a CUDA fatbin (bad magic)");
  const uint16_t header = read_at<uint16_t>(b, 6, "fatbin header");
  const uint64_t size = read_at<uint64_t>(b, 8, "fatbin header");
  if (header + size > b.size()) throw Error("truncated fatbin");
  std::vector<Embedded> out;
  for (uint64_t off = header; off < header + size;) {
    const uint16_t kind = read_at<uint16_t>(b, off, "fatbin entry");
    const uint32_t ehs = read_at<uint32_t>(b, off + 4, "fatbin entry");
    const uint64_t psize = read_at<uint64_t>(b, off + 8, "fatbin entry");
    const uint32_t sm = read_at<uint32_t>(b, off + 28, "fatbin entry");
    if (ehs < 32 || off + ehs + psize > b.size()) throw Error("corrupt fatbin entry");
    Embedded e;
    e.what = std::string(kind == 2   ? "elf"
                         : kind == 1 ? "ptx"
                                     : "kind" + std::to_string(kind)) +
             " sm_" + std::to_string(sm);
    std::string payload = b.substr(off + ehs, psize);
    if (payload.compare(0, 4, ELFMAG) == 0) e.bytes = std::move(payload);
    out.push_back(std::move(e));
    off += ehs + psize;
  }
  return out;
}

// clang-offload-bundler: "__CLANG_OFFLOAD_BUNDLE__", u64 count, then per entry {u64 offset,
// u64 size, u64 triple length, triple}.
std::vector<Embedded> offload_bundle_entries(const std::string& b) {
  static const std::string magic = "__CLANG_OFFLOAD_BUNDLE__";
  if (b.compare(0, magic.size(), magic) != 0) throw Error("not a clang offload bundle");
  size_t pos = magic.size();
  const uint64_t n = read_at<uint64_t>(b, pos, "bundle header");
  pos += 8;
  std::vector<Embedded> out;
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t off = read_at<uint64_t>(b, pos, "bundle entry"),
                   size = read_at<uint64_t>(b, pos + 8, "bundle entry"),
                   len = read_at<uint64_t>(b, pos + 16, "bundle entry");
    pos += 24;
    if (pos + len > b.size() || off + size > b.size()) throw Error("corrupt offload bundle entry");
    Embedded e;
    e.what = b.substr(pos, len);
    pos += len;
    std::string payload = b.substr(off, size);
    if (payload.compare(0, 4, ELFMAG) == 0) e.bytes = std::move(payload);
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<std::string> launch_problems(const ElfImage& img, const OpInfo& op) {
  std::vector<std::string> problems;
  for (const auto& entry_info : op.entries) {
    const std::string& entry = entry_info.name;
    if (op.gpu_launcher) {  // the op's launch.cpp sizes the grids: no plans; its stage-0 kernels by name
      for (const auto& dtype : op.dtypes) {
        const std::string kname = detail::gpu_kernel_name(op.name, entry, dtype, 0);
        auto f = img.symbols.find(kname);
        if (f == img.symbols.end() || !f->second.function) problems.push_back("no kernel " + kname);
      }
      continue;
    }
    const std::string pname = detail::gpu_plan_name(op.name, entry);
    auto it = img.symbols.find(pname);
    if (it == img.symbols.end() || it->second.function) {
      problems.push_back("no plan " + pname);
      continue;
    }
    if (it->second.bytes.size() != sizeof(opf_gpu_plan)) {
      problems.push_back("plan " + pname + " has " + std::to_string(it->second.bytes.size()) +
                         " bytes of contents, expected " + std::to_string(sizeof(opf_gpu_plan)));
      continue;
    }
    opf_gpu_plan plan;
    std::memcpy(&plan, it->second.bytes.data(), sizeof plan);
    if (std::string why = detail::gpu_plan_problem(plan); !why.empty()) {
      problems.push_back("plan " + pname + ": " + why);
      continue;
    }
    for (const auto& dtype : op.dtypes)
      for (int k = 0; k < plan.nstages; ++k) {
        const std::string kname = detail::gpu_kernel_name(op.name, entry, dtype, k);
        auto f = img.symbols.find(kname);
        if (f == img.symbols.end() || !f->second.function) problems.push_back("no kernel " + kname);
      }
  }
  return problems;
}

}  // namespace opf::test
