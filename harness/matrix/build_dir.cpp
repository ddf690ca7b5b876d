#include "matrix/build_dir.h"

#include <unistd.h>

#include "common/sha256.h"

namespace opf::matrix {

std::string build_dir_beside_source(const std::string& source, const std::string& what, const std::string& owner,
                                    const std::string& fallback) {
  if (::access(source.c_str(), W_OK) != 0) return fallback;
  return source + "/build-" + what + "-" + hash::sha256_hex(owner).substr(0, 8);
}

}  // namespace opf::matrix
