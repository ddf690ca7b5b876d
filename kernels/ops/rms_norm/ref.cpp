// rms_norm — placeholder until its reference lands.
#include "opforge/manifest.h"
namespace opf::ops {
namespace {
CaseDesc describe(std::string_view, DType, const Shape&, const Params&) {
  CaseDesc c;
  c.unsupported = "reference not written yet";
  return c;
}
void reference(std::string_view, std::vector<RefArg>&, const Params&) {}
}  // namespace
extern const OpSpec rms_norm_spec{describe, nullptr, reference};
}  // namespace opf::ops
