// What an op is, in C++: the manifest entry (generated from kernels/manifest.toml) plus the op's
// own case description and float64 reference (its ref.cpp). The suites, the CLI and the loader
// loop over these; nothing else lists ops.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "opforge/dtype.h"

namespace opf {

using Shape = std::vector<int64_t>;

struct Params {
  std::vector<std::pair<std::string, double>> values;  // manifest order
  double get(std::string_view name) const;             // throws opf::Error if absent
};

enum class Role { in, out, inout };  // inout: the kernel overwrites an input (e.g. dx written into dy)

struct Fill {
  enum Kind { uniform, mask } kind = uniform;
  double lo = -1.0, hi = 1.0;  // uniform range
  double p = 0.25;             // mask: probability of a 1 (masked)
};

struct ArgDesc {
  std::string name;
  Role role = Role::in;
  DType dtype = DType::f32;
  Shape shape;
  Fill fill;
  bool derived = false;  // an input the suite does not draw: OpSpec::prepare computes it
  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

struct CaseDesc {
  std::vector<ArgDesc> args;  // ABI argument order
  int64_t reduce_len = 1;     // longest reduction feeding an output, for tolerances
  double bytes = 0;           // bytes an ideal kernel must move
  double flops = 0;
  std::string unsupported;    // non-empty: this shape is not valid for the op (reason)
};

// One argument in float64 for the reference: inputs hold the values *as stored* (already rounded
// to the storage dtype); the reference writes out/inout values.
struct RefArg {
  const ArgDesc* desc = nullptr;
  std::vector<double> v;
};

struct OpSpec {
  CaseDesc (*describe)(std::string_view entry, DType dtype, const Shape& shape, const Params& p);
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
  std::vector<std::string> entries;
  std::vector<std::string> dtypes;
  std::vector<std::string> declared_backends;  // backends with sources in the op folder
  std::vector<std::string> enabled_backends;   // built into this configuration
  std::vector<std::string> prebuilt_backends;  // modules Meson compiled (mode=prebuilt/both)
  std::vector<std::pair<std::string, double>> params;
  std::vector<std::pair<std::string, double>> tune;
  std::vector<Shape> cases;
  std::vector<Shape> bench;
  std::vector<std::string> peers;
  const OpSpec* spec = nullptr;

  bool has_backend(std::string_view b) const;
  bool is_prebuilt(std::string_view b) const;
  Params default_params() const { return Params{params}; }
};

// Every op enabled in this build, in manifest order.
const std::vector<OpInfo>& op_table();
const OpInfo* find_op(std::string_view name);

}  // namespace opf
