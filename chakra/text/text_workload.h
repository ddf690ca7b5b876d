// An ASTRA-sim text workload as read from its file: the parallelism line, the layer-count line
// and one record per layer (name, reserved, then forward / input-gradient / weight-gradient
// compute time, comm type and comm size, and the update time).
//
// Two readers share this structure. compat_reference reads like the reference TextConverter:
// Python `str.split()` tokens, Python `int()` numbers (sign, `1_000`), every line after the
// second is a layer, nothing is checked that the reference does not use. The default reader is
// strict and tolerant where it should be: blank lines are skipped, numbers are plain decimal,
// comm types must be known, layer names unique; anything else is a `file:line: problem` error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "py_text.h"

namespace opf::chakra {

enum class Parallelism { kMicro, kData, kModel, kHybridDataModel, kHybridModelData, kHybridDlrm, kHybridDlrmEnhanced };

struct TextPhase {
  PyInt compute_time;
  std::string comm_type;  // as written: ALLREDUCE, NONE, ...
  PyInt comm_size;
};

struct TextLayer {
  size_t line = 0;  // 1-based line in the file
  std::string name;
  TextPhase fwd, ig, wg;  // forward, input gradient, weight gradient
  std::string update_time;
};

struct TextWorkload {
  std::string path;
  Parallelism type = Parallelism::kMicro;
  std::string type_name;
  size_t type_line = 1, count_line = 2;
  bool has_last_bottom_layer = false;
  PyInt last_bottom_layer;  // HYBRID_DLRM*: the second token of the first line
  PyInt header_layers;      // the layer count as written
  std::vector<TextLayer> layers;
  std::string input_text;  // the whole file as the reference stores it (universal newlines)
};

struct TextReadOptions {
  bool compat_reference = false;
  std::function<void(const std::string&)> warn;  // default mode: header/file disagreements
};

// Throws InputError "FILE:LINE: problem" (FILE: problem for the whole file).
TextWorkload read_text_workload(const std::string& path, const TextReadOptions& opt);

const char* parallelism_name(Parallelism p);

}  // namespace opf::chakra
