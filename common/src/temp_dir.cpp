#include "common/temp_dir.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "opforge/error.h"

namespace opf::files {
namespace {

std::string temp_root() {
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

}  // namespace

TempDir::TempDir(const std::string& prefix, const std::string& parent) {
  if (!create(prefix, parent))
    throw Error("cannot create a temp dir " + (parent.empty() ? temp_root() : parent) + "/" + prefix +
                "XXXXXX: " + std::strerror(errno));
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

bool TempDir::create(const std::string& prefix, const std::string& parent) {
  std::string t = (parent.empty() ? temp_root() : parent) + "/" + prefix + "XXXXXX";
  if (!::mkdtemp(t.data())) return false;
  path_ = t;
  return true;
}

}  // namespace opf::files
