// A directory that exists for one scope: mkdtemp, and removed with everything in it on
// destruction unless release()d (e.g. after it was renamed into place).
#pragma once

#include <string>

namespace opf::files {

class TempDir {
 public:
  TempDir() = default;
  // Throws opf::Error naming the template: for callers that need no wording of their own.
  explicit TempDir(const std::string& prefix, const std::string& parent = "");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // mkdtemp "<parent>/<prefix>XXXXXX" (mode 0700); parent "" means $TMPDIR, or /tmp when unset.
  // False with errno set on failure, so a caller can word its own error.
  bool create(const std::string& prefix, const std::string& parent = "");
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  void release() { path_.clear(); }  // keep the directory: it is no longer ours to remove

 private:
  std::string path_;
};

}  // namespace opf::files
