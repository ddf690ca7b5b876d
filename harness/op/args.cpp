#include "op/args.h"

#include <algorithm>

#include "op/params.h"
#include "core/manifest_shapes.h"
#include "op/text.h"
#include "opforge/error.h"

namespace opf::cli {
namespace {

std::string arg_names(const EntryInfo& e) {
  std::vector<std::string> n;
  for (const ArgInfo& a : e.args) n.push_back(a.name);
  return join(n);
}

// The .npy descr a file for an argument of dtype d must have (bf16: f32, see args.h).
std::string file_descr(DType d) {
  npy::Array a;
  a.dtype = d == DType::bf16 ? DType::f32 : d;
  return npy::descr(a);
}

struct Spec {
  std::string file;
  npy::Array array;
};

// --in specs grouped per manifest argument, files not read yet.
std::vector<std::vector<Spec>> group_specs(const OpInfo& op, const EntryInfo& entry,
                                           const std::vector<std::string>& specs) {
  std::vector<std::vector<Spec>> by_arg(entry.args.size());
  for (const std::string& s : specs) {
    const auto [name, file] = split_assignment(s, "--in");
    const ArgInfo* a = entry.find(name);
    if (!a)
      throw Error("unknown argument '" + name + "' for " + op.name + " " + entry.name +
                  " (arguments: " + arg_names(entry) + ")");
    if (file.empty()) throw Error("argument '" + name + "': --in " + name + "= names no file");
    auto& slot = by_arg[size_t(a - entry.args.data())];
    if (!a->list && !slot.empty()) throw Error("argument '" + name + "' is given twice (it is one tensor, not a list)");
    slot.push_back({file, {}});
  }
  for (size_t i = 0; i < entry.args.size(); ++i) {
    const ArgInfo& a = entry.args[i];
    if (!a.list && a.role != Role::out && by_arg[i].empty())
      throw Error("argument '" + a.name + "' (" + std::string(role_name(a.role)) + ") is missing: give it with --in " +
                  a.name + "=FILE");
  }
  return by_arg;
}

DType choose_storage(const OpInfo& op, const EntryInfo& entry, const std::vector<std::vector<Spec>>& by_arg,
                     std::optional<DType> requested) {
  const std::string runs = op.name + " runs " + join(op.dtypes);
  auto supported = [&](DType d) {
    return std::find(op.dtypes.begin(), op.dtypes.end(), dtype_name(d)) != op.dtypes.end();
  };
  if (requested) {
    if (!supported(*requested)) throw Error("--dtype " + std::string(dtype_name(*requested)) + ": " + runs);
    return *requested;
  }
  for (size_t i = 0; i < entry.args.size(); ++i) {
    const ArgInfo& a = entry.args[i];
    if (a.rule != DTypeRule::storage || a.role == Role::out) continue;
    for (const Spec& s : by_arg[i]) {
      const DType d = s.array.dtype;
      if (d != DType::f32 && d != DType::f16 && d != DType::f64) continue;
      if (!supported(d))
        throw Error("argument '" + a.name + "': " + s.file + " holds " + std::string(dtype_name(d)) + "; " + runs +
                    " (choose one with --dtype; bf16 takes '<f4' files)");
      return d;
    }
  }
  const auto first = op.dtypes.empty() ? std::nullopt : dtype_from_name(op.dtypes.front());
  if (!first) throw Error("op '" + op.name + "' lists no dtype");
  return *first;
}

// The file's data as the argument's dtype, or an error naming both.
std::vector<std::byte> convert(const ArgInfo& a, DType want, Spec& s) {
  const npy::Array& f = s.array;
  if (f.dtype == want && want != DType::bf16) return std::move(s.array.data);
  if (want == DType::bf16 && f.dtype == DType::f32) {
    std::vector<std::byte> out(size_t(f.numel()) * 2);
    for (int64_t i = 0; i < f.numel(); ++i)
      store_element(DType::bf16, out.data(), i, load_element(DType::f32, f.data.data(), i));
    return out;
  }
  throw Error("argument '" + a.name + "': " + s.file + ": field 'descr' is '" + npy::descr(f) + "' (" +
              std::string(dtype_name(f.dtype)) + "), but the argument is " + std::string(dtype_name(want)) + " ('" +
              file_descr(want) + "')");
}

}  // namespace

HostCall load_call(const OpInfo& op, const EntryInfo& entry, const std::vector<std::string>& in_specs,
                   std::optional<DType> dtype) {
  auto by_arg = group_specs(op, entry, in_specs);
  for (size_t i = 0; i < entry.args.size(); ++i)
    for (Spec& s : by_arg[i]) {
      try {
        s.array = npy::read(s.file);
      } catch (const Error& e) {
        throw Error("argument '" + entry.args[i].name + "': " + e.what());
      }
      if (s.array.shape.size() > OPF_MAX_DIMS)
        throw Error("argument '" + entry.args[i].name + "': " + s.file + " has " +
                    std::to_string(s.array.shape.size()) + " dims (at most " + std::to_string(OPF_MAX_DIMS) + ")");
    }

  HostCall call;
  call.storage = choose_storage(op, entry, by_arg, dtype);
  ShapeBinder shapes;
  for (size_t i = 0; i < entry.args.size(); ++i) {
    const ArgInfo& a = entry.args[i];
    HostArg h;
    h.info = &a;
    h.dtype = a.dtype_for(call.storage);
    h.supplied = !by_arg[i].empty();
    for (size_t k = 0; k < by_arg[i].size(); ++k) {
      Spec& s = by_arg[i][k];
      shapes.bind(a, s.array.shape, a.list ? int(k) : -1);
      HostTensor t;
      t.file = s.file;
      t.shape = s.array.shape;
      // a supplied out argument gives its shape only: the op overwrites its contents
      if (a.role == Role::out) t.bytes.assign(size_t(s.array.numel()) * dtype_size(h.dtype), std::byte{0});
      else t.bytes = convert(a, h.dtype, s);
      h.elems.push_back(std::move(t));
    }
    call.args.push_back(std::move(h));
  }
  // outputs after every binding: an out argument may precede the input that binds its dims
  for (HostArg& h : call.args) {
    if (h.info->role != Role::out || h.supplied || h.info->list) continue;
    HostTensor t;
    t.shape = shapes.infer(*h.info);
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    t.bytes.assign(size_t(n) * dtype_size(h.dtype), std::byte{0});
    h.elems.push_back(std::move(t));
  }
  return call;
}

npy::Array to_npy(const HostArg& arg, const HostTensor& t) {
  npy::Array a;
  a.shape = t.shape;
  if (arg.dtype != DType::bf16) {
    a.dtype = arg.dtype;
    a.data = t.bytes;
    return a;
  }
  a.dtype = DType::f32;
  const int64_t n = a.numel();
  a.data.resize(size_t(n) * 4);
  for (int64_t i = 0; i < n; ++i)
    store_element(DType::f32, a.data.data(), i, load_element(DType::bf16, t.bytes.data(), i));
  return a;
}

}  // namespace opf::cli
