// The primitive under every atomic output: a file created beside its target (same directory,
// so the same filesystem and rename() is atomic) that replaces the target only on publish().
// Destroyed unpublished, it is closed and removed, so a failed write leaves nothing behind and
// an existing target untouched. Failures return false with errno set: callers word their own
// errors (each names what it was writing in its own terms).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

namespace opf::files {

class TempFile {
 public:
  TempFile() = default;
  ~TempFile();
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  // Creates "<target>.tmp.XXXXXX" (mkstemp: unique, so concurrent writers never share a temp
  // file) with permissions mode & ~umask, as open(2) would give a new file.
  bool create(const std::string& target, mode_t mode);
  bool write_all(const char* p, size_t n);  // retries short writes and EINTR
  bool close(bool sync);                    // fsync first when sync; the fd is gone either way
  bool publish();                           // closes if still open, renames over the target

  int fd() const { return fd_; }
  const std::string& path() const { return tmp_; }  // the temp file's path

 private:
  std::string target_, tmp_;
  int fd_ = -1;
  bool published_ = false;
};

}  // namespace opf::files
