#include "op/out_dir.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "opforge/error.h"

namespace opf::cli {
namespace fs = std::filesystem;

OutputDir::OutputDir(const std::string& dir, bool force) : force_(force) {
  fs::path p(dir);
  if (!p.has_filename()) p = p.parent_path();  // "out/" names "out"
  p = fs::absolute(p).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  dir_ = p.string();
  std::error_code ec;
  if (fs::exists(p, ec) && !fs::is_directory(p, ec)) throw Error("--out " + dir + ": exists and is not a directory");
  const fs::path parent = p.parent_path();
  if (!fs::is_directory(parent, ec))
    throw Error("--out " + dir + ": parent directory " + parent.string() + " does not exist");
  std::string prefix = ".";  // built up: "." + string trips GCC 12's false -Wrestrict
  prefix += p.filename().string() + ".opforge-tmp-";
  if (!tmp_.create(prefix, parent.string()))
    throw Error("--out " + dir + ": cannot create a temp dir in " + parent.string() + ": " + std::strerror(errno));
  // mkdtemp makes it 0700; when it becomes DIR it should look like any mkdir'd directory
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::chmod(tmp_.path().c_str(), 0777 & ~mask);
}

void OutputDir::check_free(const std::string& name, const std::string& arg) const {
  std::error_code ec;
  if (!force_ && fs::exists(fs::symlink_status(target(name), ec)))
    throw Error("argument '" + arg + "': " + target(name) + " exists (use --force to overwrite)");
}

std::string OutputDir::staged(const std::string& name) const { return tmp_.file(name); }
std::string OutputDir::target(const std::string& name) const { return dir_ + "/" + name; }

void OutputDir::commit(const std::vector<std::string>& names) {
  // DIR absent: one rename publishes every output at once
  if (!fs::exists(dir_) && ::rename(tmp_.path().c_str(), dir_.c_str()) == 0) {
    tmp_.release();
    return;
  }
  for (const std::string& n : names) {
    const std::string from = staged(n), to = target(n);
    // RENAME_NOREPLACE: a file that appeared in DIR while the call ran is not silently replaced
    const int rc = force_ ? ::rename(from.c_str(), to.c_str())
                          : ::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE);
    if (rc != 0) {
      if (errno == EEXIST) throw Error(to + " appeared while the op ran; not overwritten (use --force)");
      throw Error("cannot move " + from + " to " + to + ": " + std::strerror(errno));
    }
  }
}

}  // namespace opf::cli
