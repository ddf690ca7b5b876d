// Helpers for the from-text tests: the in-repo workloads and reference outputs (data/, see
// data/SOURCES.md), running from_text into a temp dir, reading .et files back.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../../tests/test_util.h"
#include "byte_source.h"
#include "et_stream.h"
#include "from_text.h"
#include "proto/et_def.pb.h"

namespace opf::chakra::test {

// The six workloads the reference converts (Transformer_HybridParallel is its error case).
inline const std::vector<std::string>& reference_workloads() {
  static const std::vector<std::string> w = {
      "AllGather_128KB",   "DLRM_HybridParallel",   "MLP_HybridParallel_Data_Model",
      "MLP_ModelParallel", "Resnet50_DataParallel", "microAllReduce"};
  return w;
}

inline std::string data_file(const std::string& rel) { return std::string(OPF_TEXT_DATA) + "/" + rel; }
inline std::string workload_txt(const std::string& w) { return data_file(w + "/" + w + ".txt"); }
// The reference converter's file for NPU `npu` of a run with `npus` NPUs and `passes` passes.
inline std::string reference_et(const std::string& w, int npus, int passes, int npu) {
  return read_all(data_file(w + "/" + w + ".npus" + std::to_string(npus) + ".passes" + std::to_string(passes) + "." +
                            std::to_string(npu) + ".et.gz"));
}

struct EtFile {
  ChakraProtoMsg::GlobalMetadata meta;
  std::vector<ChakraProtoMsg::Node> nodes;
};

inline EtFile parse_et(const std::string& path) {
  EtFile f;
  EtReader r(path, false);
  EXPECT_TRUE(r.next(f.meta)) << path;
  ChakraProtoMsg::Node n;
  while (r.next(n)) f.nodes.push_back(n);
  return f;
}

inline EtFile parse_et_bytes(const std::string& bytes) {
  TempDir td;
  write_file(td.file("x.et"), bytes);
  return parse_et(td.file("x.et"));
}

inline std::string input_file_attr(const EtFile& f) {
  for (const auto& a : f.meta.attr())
    if (a.name() == "input_file") return a.string_val();
  return "<none>";
}

// from_text with warnings collected instead of printed.
inline FromTextStats run_from_text(const std::string& in, const std::string& prefix, uint64_t npus, uint64_t passes,
                                   bool compat, std::vector<std::string>* warnings = nullptr) {
  FromTextOptions o;
  o.npus = npus;
  o.passes = passes;
  o.compat_reference = compat;
  o.warn = [warnings](const std::string& w) {
    if (warnings) warnings->push_back(w);
  };
  return from_text(in, prefix, o);
}

// Everything but the name: what a simulator sees.
inline std::string structure(const ChakraProtoMsg::Node& n) {
  ChakraProtoMsg::Node c = n;
  c.clear_name();
  return c.ShortDebugString();
}

}  // namespace opf::chakra::test
