// Several output files that appear together or not at all (one .et per NPU or rank): each is
// written completely to its temp file when added, and publish() renames them all into place.
// If publish() is never reached, every temp file is removed and existing files stay as they were.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "atomic_output.h"

namespace opf::chakra {

class OutputSet {
 public:
  void add(const std::string& path, std::string_view bytes);
  void publish();
  size_t size() const { return outs_.size(); }

 private:
  std::vector<std::unique_ptr<AtomicOutput>> outs_;
};

}  // namespace opf::chakra
