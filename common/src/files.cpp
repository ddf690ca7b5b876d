#include "common/files.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/temp_file.h"
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
  TempFile tmp;
  if (!tmp.create(path, executable ? 0755 : 0644))
    throw Error(path + ".tmp.XXXXXX: cannot create (" + std::strerror(errno) + ")");
  if (!tmp.write_all(data.data(), data.size()))
    throw Error(tmp.path() + ": write failed (" + std::strerror(errno) + ")");
  // a failed fsync or close (EIO, ENOSPC on a delayed write) may have lost data: the target keeps
  // its old content. EINVAL: a filesystem without fsync, where close still reports write errors.
  if (::fsync(tmp.fd()) != 0 && errno != EINVAL)
    throw Error(tmp.path() + ": write failed at fsync (" + std::strerror(errno) + ")");
  if (!tmp.close(false)) throw Error(tmp.path() + ": write failed at close (" + std::strerror(errno) + ")");
  if (!tmp.publish()) throw Error(path + ": cannot publish (" + std::strerror(errno) + ")");
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
