// File helpers every record writer uses: whole-file reads and atomic writes (temp file in the
// same directory, fsync, rename), so an interrupted run never leaves a half-written record.
#pragma once

#include <string>

namespace opf::files {

std::string read(const std::string& path);  // throws opf::Error naming the path
bool read_if_exists(const std::string& path, std::string& out);
void write_atomic(const std::string& path, const std::string& data, bool executable = false);
void copy_atomic(const std::string& from, const std::string& to);
bool exists(const std::string& path);
void make_dirs(const std::string& path);

}  // namespace opf::files
