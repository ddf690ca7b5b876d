// The host side of one `opforge op` call: the --in NAME=FILE specs grouped by argument, the
// .npy files read and checked against the entry (names, dtypes, shapes), converted to the
// call's dtypes, and the shapes of outputs nobody supplied inferred (core/manifest_shapes.h).
//
// File dtypes: an argument of dtype D takes a .npy of exactly D ('<f4', '<f2', '<f8', '<i8',
// '<i4', '|u1' or '|b1' for u8), except bf16, which NumPy lacks: bf16 arguments are read from
// and written as '<f4' files, converted with round-to-nearest-even (opf::f32_to_bf16).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "npy.h"
#include "opforge/manifest.h"

namespace opf::cli {

struct HostTensor {
  std::string file;  // the .npy it came from; "" for an inferred output
  Shape shape;
  std::vector<std::byte> bytes;  // numel * dtype_size(HostArg::dtype), C order
};

struct HostArg {
  const ArgInfo* info = nullptr;
  DType dtype = DType::f32;       // this argument's dtype in the call
  bool supplied = false;          // given with --in (an out argument: for its shape only)
  std::vector<HostTensor> elems;  // one for a tensor argument; a list's elements, in order
};

struct HostCall {
  DType storage = DType::f32;  // T
  std::vector<HostArg> args;   // manifest order
};

// dtype: --dtype, or nullopt to take T from the first float input with rule T (else the op's
// first dtype). A list argument with no --in is an empty list. Throws opf::Error, one line
// naming the argument (and the file for .npy problems).
HostCall load_call(const OpInfo& op, const EntryInfo& entry, const std::vector<std::string>& in_specs,
                   std::optional<DType> dtype);

// An argument's tensor as written to DIR/NAME.npy (bf16 as f32).
npy::Array to_npy(const HostArg& arg, const HostTensor& t);

}  // namespace opf::cli
