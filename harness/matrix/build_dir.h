// Where the harness puts the Meson builds it makes (matrix cells, `opforge ab`'s trees).
#pragma once

#include <string>

namespace opf::matrix {

// `<source>/build-<what>-<8 hex of SHA-256(owner)>`: one level below the source root, like the
// user's build/. Meson writes every source path relative to the build directory, so only at that
// depth are a build's compile lines the same as build/'s, and ccache (which hashes the command
// line) serves its objects: a matrix cell one level deeper recompiled the whole tree cold. `owner`
// (a run directory, an ab output directory) keeps two owners' builds apart. A source tree that is
// not writable gets `fallback` instead.
std::string build_dir_beside_source(const std::string& source, const std::string& what, const std::string& owner,
                                    const std::string& fallback);

}  // namespace opf::matrix
