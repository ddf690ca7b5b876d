#include "staged_case.h"

#include <cstring>

#include "opforge/error.h"

namespace opf::suites {
namespace {
constexpr std::byte kGuardByte{0x5c};
}

StagedCase::StagedCase(Device& dev, const DrawnCase& c, const Params& params) : dev_(dev), case_(c) {
  for (const auto& [name, v] : params.values) params_.push_back(v);
  const std::vector<std::byte> guard(kGuard, kGuardByte);
  try {
    for (const HostArg& h : c.host) {
      const ArgDesc& a = *h.desc;
      void* p = dev_.alloc(h.bytes.size() + kGuard);
      ptrs_.push_back(p);
      dev_.to_device(p, h.bytes.data(), h.bytes.size());
      dev_.to_device(static_cast<std::byte*>(p) + h.bytes.size(), guard.data(), kGuard);
      opf_tensor t{};
      t.data = p;
      t.dtype = int32_t(a.dtype);
      t.ndim = int32_t(a.shape.size());
      for (size_t d = 0; d < a.shape.size(); ++d) t.shape[d] = a.shape[d];
      tensors_.push_back(t);
    }
    dev_.synchronize();
  } catch (...) {
    for (void* p : ptrs_) dev_.free(p);
    throw;
  }
}

StagedCase::~StagedCase() {
  for (void* p : ptrs_) dev_.free(p);
}

void StagedCase::run(const opf_module_info* module, std::string_view entry) {
  if (entry_ != entry) entry_ = std::string(entry);
  opf_call call{};
  call.entry = entry_.c_str();
  call.args = tensors_.data();
  call.nargs = int32_t(tensors_.size());
  call.params = params_.data();
  call.nparams = int32_t(params_.size());
  call.stream = nullptr;
  char err[512] = "";
  if (module->run(module, &call, err, sizeof err) != 0)
    throw Error(std::string(module->op) + "/" + module->backend + " " + entry_ + ": " + err);
}

std::vector<std::byte> StagedCase::fetch(size_t i) const {
  std::vector<std::byte> out(case_.host[i].bytes.size());
  dev_.to_host(out.data(), ptrs_[i], out.size());
  return out;
}

std::vector<std::string> StagedCase::overrun_args() const {
  std::vector<std::string> bad;
  std::vector<std::byte> g(kGuard);
  for (size_t i = 0; i < ptrs_.size(); ++i) {
    dev_.to_host(g.data(), static_cast<const std::byte*>(ptrs_[i]) + case_.host[i].bytes.size(), kGuard);
    for (std::byte b : g)
      if (b != kGuardByte) {
        bad.push_back(case_.host[i].desc->name);
        break;
      }
  }
  return bad;
}

bool StagedCase::has_inouts() const {
  for (const HostArg& h : case_.host)
    if (h.desc->role == Role::inout) return true;
  return false;
}

void StagedCase::restore_inouts() {
  for (size_t i = 0; i < ptrs_.size(); ++i)
    if (case_.host[i].desc->role == Role::inout)
      dev_.to_device(ptrs_[i], case_.host[i].bytes.data(), case_.host[i].bytes.size());
  dev_.synchronize();
}

}  // namespace opf::suites
