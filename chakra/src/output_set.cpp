#include "output_set.h"

namespace opf::chakra {

void OutputSet::add(const std::string& path, std::string_view bytes) {
  outs_.push_back(std::make_unique<AtomicOutput>(path));
  outs_.back()->write(bytes);
  outs_.back()->finish();  // one open descriptor at a time, whatever the number of files
}

void OutputSet::publish() {
  for (auto& o : outs_) o->commit();
}

}  // namespace opf::chakra
