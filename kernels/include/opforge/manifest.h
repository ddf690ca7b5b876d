// What an op is, in C++: the manifest entry (generated from kernels/manifest.toml: entries with
// their argument lists, typed params, dtypes, backends, deps, cases) plus the op's own case
// description and float64 reference (its ref.cpp). The suites, the CLI and the loader loop over
// these; nothing else lists ops.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "opforge/dtype.h"

namespace opf {

using Shape = std::vector<int64_t>;

// ---------------------------------------------------------------- params
enum class ParamType { f64, i64, boolean, enumeration };
std::string_view param_type_name(ParamType t);  // "f64", "i64", "bool", "enum"

struct ParamInfo {
  std::string name;
  ParamType type = ParamType::f64;
  double def = 0;  // enum: index into choices; bool: 0/1
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_open = false, max_open = false;  // exclusive bounds (manifest `above` / `below`)
  double sample_lo = 0, sample_hi = 0;      // where the sweep draws non-default numeric values
  std::vector<std::string> choices;         // enum
  std::string doc;
  std::vector<double> sweep;  // f64/i64: values the sweep also runs, each alone (manifest `sweep`)
  // Entries whose CPU JIT modules are split by this param (manifest `jit_variant`): one module per
  // variant value, compiled at the first call that needs it (cpu/variant.h run_flag).
  std::vector<std::string> jit_variant;
  // f64/i64 (manifest `jit_values`): the values that have kernels of their own; a variant each, and
  // one more for every other value.
  std::vector<double> jit_values;
  bool splits_jit(std::string_view entry) const;
  // The variant values: bool 0/1, enum the choice index, f64/i64 the index in jit_values (their
  // count: any other value) or, without jit_values, 0 (zero) or 1 (nonzero).
  int jit_variant_count() const {
    return type == ParamType::enumeration ? int(choices.size()) : jit_values.empty() ? 2 : int(jit_values.size()) + 1;
  }
  int64_t jit_variant_of(double v) const;
  // Appends "name=k" to a variant string ("name=k,name=k": the loader's -DOPF_JIT_VARIANT).
  void append_jit_variant(std::string* variant, int64_t k) const;
  // "" when v is a valid value of this param, else why not (one phrase).
  std::string check(double v) const;
  std::string format(double v) const;  // "1e-05", "7", "true", "sum"
};

// Param values by name, in manifest order. Every value is a double (i64 exact to 2^53; bool 0/1;
// enum = choice index).
struct Params {
  std::vector<std::pair<std::string, double>> values;
  double get(std::string_view name) const;  // throws opf::Error if absent
  int64_t get_int(std::string_view name) const { return int64_t(get(name)); }
  bool flag(std::string_view name) const { return get(name) != 0; }
  void set(std::string_view name, double v);  // throws opf::Error if absent
};

// ---------------------------------------------------------------- entries and arguments
enum class Role { in, out, inout };  // inout: the kernel overwrites an input (e.g. dx written into dy)
std::string_view role_name(Role r);

// How an argument's dtype follows the case's storage dtype T.
enum class DTypeRule {
  storage,  // T itself
  acc,      // the accumulation type: f32 for f32/f16/bf16, f64 for f64
  fixed,    // always ArgInfo::fixed (e.g. i64 labels, f32 optimizer states, i32 flags)
};

struct ArgInfo {
  std::string name;
  Role role = Role::in;
  DTypeRule rule = DTypeRule::storage;
  DType fixed = DType::f32;
  bool list = false;  // a list of tensors (opf_arg.count = its length, may be 0)
  bool view = false;  // accepts non-contiguous strides
  std::string shape;  // documentation: "[rows, cols]", "[n_i]"
  DType dtype_for(DType storage) const;
  std::string dtype_text() const;  // "T", "acc", "f32", ...
};

struct EntryInfo {
  std::string name;
  std::vector<ArgInfo> args;
  const ArgInfo* find(std::string_view arg) const;
};

// ---------------------------------------------------------------- cases (ref.cpp)
struct Fill {
  enum Kind { uniform, mask, index } kind = uniform;
  double lo = -1.0, hi = 1.0;  // uniform: [lo, hi); index: integers in [lo, hi)
  double p = 0.25;             // mask: probability of a 1 (masked)
};

struct ArgDesc {
  std::string name;
  Role role = Role::in;
  DType dtype = DType::f32;
  Shape shape;
  Fill fill;
  bool derived = false;  // an input the suite does not draw: OpSpec::prepare computes it
  int list_index = -1;   // element k of a list argument; -1 for a tensor argument
  bool set = false;      // describe() gave it a shape
  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

// One call's arguments as the suites build it: describe() receives it with c.entry, c.dtype and
// one placeholder per manifest argument (name, role, dtype resolved from the rule) and gives each a
// shape and fill. List arguments become one ArgDesc per element, contiguous, in list order.
struct CaseDesc {
  std::string entry;
  DType dtype = DType::f32;
  std::vector<ArgDesc> args;  // manifest order
  int64_t reduce_len = 1;     // longest reduction feeding an output, for tolerances
  double bytes = 0;           // bytes an ideal kernel must move
  double flops = 0;
  std::string unsupported;  // non-empty: this shape is not valid for the op (reason)

  ArgDesc& set(std::string_view name, Shape shape, Fill fill = {}, bool derived = false);
  void set_list(std::string_view name, const std::vector<Shape>& shapes, Fill fill = {}, bool derived = false);
  const ArgDesc& arg(std::string_view name) const;  // a tensor argument, or a list's first element
};

// One argument in float64 for the reference: inputs hold the values *as stored* (already rounded
// to the storage dtype); the reference writes out/inout values.
struct RefArg {
  const ArgDesc* desc = nullptr;
  std::vector<double> v;
};
RefArg& ref_arg(std::vector<RefArg>& args, std::string_view name);             // a tensor argument
std::span<RefArg> ref_list(std::vector<RefArg>& args, std::string_view name);  // a list's elements

struct OpSpec {
  // Fills c (see CaseDesc) for `shape`, or sets c.unsupported.
  void (*describe)(CaseDesc& c, const Shape& shape, const Params& p);
  // Computes derived inputs (e.g. backward's saved mean/rstd) from the drawn ones; may be null.
  void (*prepare)(std::string_view entry, std::vector<RefArg>& args, const Params& p);
  // Computes every out/inout argument in float64.
  void (*reference)(std::string_view entry, std::vector<RefArg>& args, const Params& p);
  // Optional extra tolerance factor for an output (ill-conditioned outputs); null = 1.
  double (*tolerance_factor)(std::string_view entry, const ArgDesc& out, DType dtype) = nullptr;
};

struct OpInfo {
  std::string name;
  std::string summary;
  std::vector<EntryInfo> entries;
  std::vector<std::string> dtypes;
  std::vector<std::string> declared_backends;  // backends with sources in the op folder
  std::vector<std::string> enabled_backends;   // built into this configuration
  std::vector<std::string> prebuilt_backends;  // modules Meson compiled (mode=prebuilt/both)
  std::vector<ParamInfo> params;
  std::vector<std::pair<std::string, double>> tune;
  std::vector<std::pair<std::string, std::vector<std::string>>> deps;  // backend -> libraries it links
  std::vector<Shape> cases;
  std::vector<Shape> bench;
  std::vector<std::string> peers;
  const OpSpec* spec = nullptr;
  bool gpu_launcher = false;  // kernels/ops/<op>/launch.cpp: host launch code for GPU modules

  bool has_backend(std::string_view b) const;
  bool is_prebuilt(std::string_view b) const;
  const EntryInfo* find_entry(std::string_view entry) const;
  const ParamInfo* find_param(std::string_view name) const;
  const std::vector<std::string>& deps_of(std::string_view backend) const;
  Params default_params() const;
  // The variants of an entry's CPU JIT modules: every combination of the values of the params
  // whose jit_variant names it, each "name=v,name=v" in manifest order; {""} when none does.
  std::vector<std::string> jit_variants(std::string_view entry) const;
};

// The op's CaseDesc for one call (manifest placeholders + ref.cpp's describe); throws opf::Error
// when the entry is unknown or describe() leaves an argument without a shape.
CaseDesc describe_case(const OpInfo& op, std::string_view entry, DType dtype, const Shape& shape, const Params& p);

// Every op enabled in this build, in manifest order.
const std::vector<OpInfo>& op_table();
const OpInfo* find_op(std::string_view name);

}  // namespace opf
