#include "opforge/call.h"

#include "opforge/error.h"
#include "opforge/threads.h"

namespace opf {

Shape contiguous_strides(const Shape& shape) {
  Shape s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

CallBuilder::CallBuilder(const OpInfo& op, std::string_view entry) : op_(op), entry_(op.find_entry(entry)) {
  if (!entry_) {
    std::string known;
    for (const EntryInfo& e : op.entries) known += (known.empty() ? "" : ", ") + e.name;
    throw Error("op '" + op.name + "' has no entry '" + std::string(entry) + "' (entries: " + known + ")");
  }
  tensors_.resize(entry_->args.size());
  given_.assign(entry_->args.size(), false);
  for (const ParamInfo& p : op.params) {
    opf_param v{};
    v.name = p.name.c_str();
    v.type = int32_t(p.type);
    if (p.type == ParamType::f64) v.f64 = p.def;
    else v.i64 = int64_t(p.def);
    params_.push_back(v);
  }
}

CallBuilder& CallBuilder::add(std::string_view arg, void* data, DType dtype, const Shape& shape, const Shape& strides) {
  for (size_t i = 0; i < entry_->args.size(); ++i) {
    const ArgInfo& a = entry_->args[i];
    if (a.name != arg) continue;
    if (!a.list && !tensors_[i].empty())
      throw Error(op_.name + " " + entry_->name + ": argument '" + a.name + "' is one tensor, not a list");
    if (shape.size() > OPF_MAX_DIMS)
      throw Error(op_.name + " " + entry_->name + ": argument '" + a.name + "' has " + std::to_string(shape.size()) +
                  " dims (at most " + std::to_string(OPF_MAX_DIMS) + ")");
    if (!strides.empty() && strides.size() != shape.size())
      throw Error(op_.name + " " + entry_->name + ": argument '" + a.name + "' has " + std::to_string(strides.size()) +
                  " strides for " + std::to_string(shape.size()) + " dims");
    opf_tensor t{};
    t.data = data;
    t.dtype = int32_t(dtype);
    t.ndim = int32_t(shape.size());
    const Shape st = strides.empty() ? contiguous_strides(shape) : strides;
    for (size_t d = 0; d < shape.size(); ++d) {
      t.shape[d] = shape[d];
      t.strides[d] = st[d];
    }
    tensors_[i].push_back(t);
    given_[i] = true;
    return *this;
  }
  throw Error(op_.name + " " + entry_->name + ": no argument '" + std::string(arg) + "'");
}

CallBuilder& CallBuilder::empty_list(std::string_view arg) {
  for (size_t i = 0; i < entry_->args.size(); ++i)
    if (entry_->args[i].name == arg) {
      if (!entry_->args[i].list)
        throw Error(op_.name + " " + entry_->name + ": argument '" + std::string(arg) + "' is not a list");
      given_[i] = true;
      return *this;
    }
  throw Error(op_.name + " " + entry_->name + ": no argument '" + std::string(arg) + "'");
}

CallBuilder& CallBuilder::param(std::string_view name, double value) {
  for (size_t i = 0; i < op_.params.size(); ++i) {
    const ParamInfo& p = op_.params[i];
    if (p.name != name) continue;
    if (std::string why = p.check(value); !why.empty())
      throw Error(op_.name + ": param '" + p.name + "' = " + p.format(value) + " " + why);
    if (p.type == ParamType::f64) params_[i].f64 = value;
    else params_[i].i64 = int64_t(value);
    return *this;
  }
  throw Error(op_.name + ": no param '" + std::string(name) + "'");
}

CallBuilder& CallBuilder::params(const Params& p) {
  for (const auto& [name, v] : p.values) param(name, v);
  return *this;
}

CallBuilder& CallBuilder::threads(int n) {
  threads_ = n;
  return *this;
}

CallBuilder& CallBuilder::stream(void* s) {
  stream_ = s;
  return *this;
}

const opf_call& CallBuilder::abi() {
  args_.clear();
  for (size_t i = 0; i < entry_->args.size(); ++i) {
    if (!given_[i]) throw Error(op_.name + " " + entry_->name + ": argument '" + entry_->args[i].name + "' is missing");
    args_.push_back(opf_arg{int32_t(tensors_[i].size()), tensors_[i].data()});
  }
  call_ = opf_call{};
  call_.entry = entry_->name.c_str();
  call_.args = args_.data();
  call_.nargs = int32_t(args_.size());
  call_.params = params_.data();
  call_.nparams = int32_t(params_.size());
  call_.stream = stream_;
  call_.host = host_threads(threads_);
  return call_;
}

std::string CallBuilder::supports(const opf_module_info* m) {
  const opf_call& c = abi();
  if (!m->supports) return "";
  char err[512] = "";
  return m->supports(m, &c, err, sizeof err) == 0 ? "" : (err[0] ? err : "unsupported (no reason given)");
}

void CallBuilder::run(const opf_module_info* m) {
  const opf_call& c = abi();
  char err[512] = "";
  if (m->run(m, &c, err, sizeof err) != 0)
    throw Error(std::string(m->op) + "/" + m->backend + " " + entry_->name + ": " + err);
}

}  // namespace opf
