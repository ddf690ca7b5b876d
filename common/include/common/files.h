// Whole-file reads and atomic writes (temp file beside the target, fsync, rename), so an
// interrupted writer never leaves a half-written file.
#pragma once

#include <string>

namespace opf::files {

std::string read(const std::string& path);  // throws opf::Error naming the path
bool read_if_exists(const std::string& path, std::string& out);
// Creates the parent directories; throws opf::Error naming the file. On failure the temp file is
// removed and an existing file at path is left as it was.
void write_atomic(const std::string& path, const std::string& data, bool executable = false);
void copy_atomic(const std::string& from, const std::string& to);
bool exists(const std::string& path);
void make_dirs(const std::string& path);  // like mkdir -p; throws opf::Error naming the path

}  // namespace opf::files
