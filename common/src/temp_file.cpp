#include "common/temp_file.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace opf::files {

TempFile::~TempFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty() && !published_) ::unlink(tmp_.c_str());
}

bool TempFile::create(const std::string& target, mode_t mode) {
  target_ = target;
  std::string t = target + ".tmp.XXXXXX";
  fd_ = ::mkostemp(t.data(), O_CLOEXEC);
  if (fd_ < 0) return false;
  tmp_ = t;
  // mkstemp makes 0600; the published file gets the mode a plain open(2) would have given it
  const mode_t um = ::umask(0);
  ::umask(um);
  ::fchmod(fd_, mode & ~um);
  return true;
}

bool TempFile::write_all(const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= size_t(w);
  }
  return true;
}

bool TempFile::close(bool sync) {
  if (fd_ < 0) return true;
  const bool synced = !sync || ::fsync(fd_) == 0;
  const int e = errno;
  const bool closed = ::close(fd_) == 0;
  fd_ = -1;
  if (!synced) errno = e;
  return synced && closed;
}

bool TempFile::publish() {
  if (fd_ >= 0 && !close(false)) return false;
  if (::rename(tmp_.c_str(), target_.c_str()) != 0) return false;
  published_ = true;
  return true;
}

}  // namespace opf::files
