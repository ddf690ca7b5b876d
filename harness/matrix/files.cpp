#include "matrix/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "opforge/error.h"

namespace opf::files {

std::string read(const std::string& path) {
  std::string out;
  if (!read_if_exists(path, out)) throw Error(path + ": cannot read file (" + std::strerror(errno) + ")");
  return out;
}

bool read_if_exists(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

void write_atomic(const std::string& path, const std::string& data, bool executable) {
  std::filesystem::path p(path);
  if (p.has_parent_path()) make_dirs(p.parent_path().string());
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, executable ? 0755 : 0644);
  if (fd < 0) throw Error(tmp + ": cannot create (" + std::strerror(errno) + ")");
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error(tmp + ": write failed (" + std::strerror(e) + ")");
    }
    done += size_t(n);
  }
  ::fsync(fd);
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    throw Error(path + ": cannot publish (" + std::strerror(e) + ")");
  }
}

void copy_atomic(const std::string& from, const std::string& to) { write_atomic(to, read(from)); }

bool exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

void make_dirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) throw Error(path + ": cannot create directory (" + ec.message() + ")");
}

}  // namespace opf::files
