// Where `opforge op` writes its outputs. Every file goes to a temp dir beside DIR (same parent,
// same filesystem) and is renamed into place only after the whole call succeeded, so a failed
// call leaves DIR as it was; an existing file is never replaced unless --force.
#pragma once

#include <string>
#include <vector>

#include "common/temp_dir.h"

namespace opf::cli {

class OutputDir {
 public:
  // Checks DIR (its parent must exist; DIR itself, if it exists, must be a directory) and makes
  // the temp dir. Throws opf::Error naming the path.
  OutputDir(const std::string& dir, bool force);
  OutputDir(const OutputDir&) = delete;
  OutputDir& operator=(const OutputDir&) = delete;

  // Throws opf::Error naming `arg` when DIR/name exists and --force was not given.
  void check_free(const std::string& name, const std::string& arg) const;
  std::string staged(const std::string& name) const;  // temp-dir path to write `name` to
  std::string target(const std::string& name) const;  // DIR/name
  const std::string& dir() const { return dir_; }     // DIR
  // Moves the staged files into DIR (renaming the temp dir itself when DIR does not exist).
  void commit(const std::vector<std::string>& names);

 private:
  std::string dir_;
  files::TempDir tmp_;  // removed with whatever is still in it
  bool force_;
};

}  // namespace opf::cli
