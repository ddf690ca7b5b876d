// Internal: the CPU JIT's compiler command line and its precompiled header (PCH).
//
// A cold CPU JIT compile used to spend about half its time parsing Highway and the standard
// headers. Meson builds a PCH of those (cpu/jit_pch.h) with the JIT's own compiler and flags
// (tools/build_jit_pch.cpp, run by kernels/meson.build), as a bundle in the build tree:
//   opf_jit_pch.h            the header (a copy of cpu/jit_pch.h); the JIT -includes it
//   opf_jit_pch.h.gch        the PCH GCC or clang picks up beside it (clang's own format)
//   opf_jit_pch.h.manifest   what it was built from: command, compiler binary, header and every
//                            header it read (size, mtime, SHA-256), the .gch, and an identity hash
// The JIT's compiler is build::cpu_jit_toolchain() (Meson option cpu_jit_cxx: Meson's own by
// default, or clang++), so a GCC build may JIT with clang.
// GCC checks a .gch against the compile's flags and macros, but never against the headers it was
// built from: a stale one would be used silently. find_pch() therefore trusts the bundle only while
// every recorded file still has its recorded content (stat first, SHA-256 when the stat differs)
// and the command is the same; otherwise the JIT compiles without it (slower, same artefact).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "opforge/build_info.h"

namespace opf::detail::cpu_jit {

// A toolchain's command (the JIT's: build::cpu_jit_toolchain()) minus ccache/sccache: ccache would turn a JIT
// compile into a cache lookup of its own (and hide compile failures' real cost); the opforge cache already plays
// that role.
std::vector<std::string> compiler(const build::Toolchain& toolchain);
// Absolute, symlink-free path of what posix_spawnp would run for `prog` ("not found: prog").
std::string resolve_program(const std::string& prog);

// The op-independent start of every CPU JIT command line: compiler(cpu_jit_toolchain()), Meson's build-type flags
// and the fixed JIT flags; with fp_contract_off, -ffp-contract=off as well (see below). The PCH is
// built with exactly this (fp_contract_off = true), plus clang's PCH-only flags.
std::vector<std::string> base_command(bool fp_contract_off);

// True when Meson's compiler is GCC (prebuilt modules honour the pragma) and `path`, before any
// #include or declaration, says
//   #pragma GCC optimize("fp-contract=off")
// (directly or inside `#if defined(__GNUC__) && !defined(__clang__)`), as every CPU op does. For
// such a file -ffp-contract=off means exactly what the pragma means. For a clang JIT, which ignores
// the pragma, the flag is what makes the module round as the prebuilt one does. For a GCC JIT,
// giving it on the command line (a) gives the PCH's headers, parsed before the op's pragma, the op's setting (without
// the flag GCC inlines a few functions differently than in a compile without the PCH; with it, the module is byte for
// byte the same either way) and (b) makes GCC's per-function switch to the pragma's option set a no-op (~0.3 s of a
// ~3.5 s cold compile here). Anything else compiles as written (no flag, no PCH).
bool source_disables_fp_contract(const std::string& path);

// Where the JIT looks for the PCH header: $OPFORGE_JIT_PCH if set ("0" or "" disables it), else the
// bundle this build made ("" when it makes none: not GCC, or no CPU backend).
std::string pch_header_path();

struct PchCheck {
  bool usable = false;
  std::string header;    // -include this (its .gch lies beside it)
  std::string identity;  // the bundle's identity hash: part of the JIT cache key
  std::string why;       // why it is not usable
  bool notable = false;  // a bundle exists but is stale or does not fit: worth a warning
};
// Whether the PCH bundle fits a compile whose command starts with `base` (base_command(true))
// and that searches `include_dirs` for its headers (a tree with its own copy of a header the
// PCH includes must get that copy, so such a tree gets no PCH). fresh = false (cache keys) may
// reuse this process's verdict while the bundle's files are unchanged; a compile asks with
// fresh = true and gets every recorded header checked again, so it never uses a stale PCH.
PchCheck find_pch(const std::vector<std::string>& base, const std::vector<std::string>& include_dirs, bool fresh);

// Builds the bundle next to header_out from header_in (the build-time step). Writes a ninja
// depfile naming dep_target. Throws opf::Error on failure; the compiler's output goes to stderr.
void build_pch(const std::string& header_in, const std::string& header_out, const std::string& depfile,
               const std::string& dep_target);

}  // namespace opf::detail::cpu_jit
