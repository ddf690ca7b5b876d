#include "staged_case.h"

#include <cstring>

#include "opforge/error.h"

namespace opf::suites {
namespace {
constexpr std::byte kGuardByte{0x5c};
}

StagedCase::StagedCase(Device& dev, const OpInfo& op, const DrawnCase& c, int threads) : dev_(dev), case_(c) {
  call_ = std::make_unique<CallBuilder>(op, c.desc.entry);
  call_->params(c.params).threads(threads);
  const std::vector<std::byte> guard(kGuard, kGuardByte);
  try {
    for (const ArgInfo& info : call_->entry().args)
      if (info.list) call_->empty_list(info.name);  // present even when the case has no elements
    for (const HostArg& h : c.host) {
      const ArgDesc& a = *h.desc;
      void* p = dev_.alloc(h.bytes.size() + kGuard);
      ptrs_.push_back(p);
      dev_.to_device(p, h.bytes.data(), h.bytes.size());
      dev_.to_device(static_cast<std::byte*>(p) + h.bytes.size(), guard.data(), kGuard);
      call_->add(a.name, p, a.dtype, a.shape);
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

std::string StagedCase::supports(const opf_module_info* module) { return call_->supports(module); }

void StagedCase::run(const opf_module_info* module) { call_->run(module); }

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
