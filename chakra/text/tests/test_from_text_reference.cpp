// --compat reference: byte identity with the reference text converter's own outputs (data/,
// produced by mlcommons/chakra's TextConverter; see data/SOURCES.md) for every workload, 1 and
// 4 NPUs, 1 and 2 passes; and the two types no reference output covers, derived from the
// covered ones by the one difference the reference code has between them.
#include <gtest/gtest.h>

#include "input_error.h"
#include "text_test_util.h"

namespace opf::chakra {
namespace {

using test::TempDir;

struct RefCase {
  std::string workload;
  int npus, passes;
};

std::vector<RefCase> ref_cases() {
  std::vector<RefCase> v;
  for (const auto& w : test::reference_workloads())
    for (int n : {1, 4})
      for (int p : {1, 2}) v.push_back({w, n, p});
  return v;
}

class ReferenceBytes : public ::testing::TestWithParam<RefCase> {};

TEST_P(ReferenceBytes, EveryNpuFileIsByteIdentical) {
  const RefCase& c = GetParam();
  TempDir td;
  auto stats = test::run_from_text(test::workload_txt(c.workload), td.file("out"), c.npus, c.passes, true);
  EXPECT_EQ(stats.files, uint64_t(c.npus));
  for (int k = 0; k < c.npus; ++k) {
    std::string ours = test::read_file(td.file("out." + std::to_string(k) + ".et"));
    std::string ref = test::reference_et(c.workload, c.npus, c.passes, k);
    ASSERT_FALSE(ref.empty());
    EXPECT_EQ(ours.size(), ref.size()) << "NPU " << k;
    EXPECT_TRUE(ours == ref) << c.workload << " npus " << c.npus << " passes " << c.passes << ": NPU " << k
                             << " differs from the reference";
  }
  EXPECT_FALSE(test::exists(td.file("out." + std::to_string(c.npus) + ".et")));
}

INSTANTIATE_TEST_SUITE_P(TextWorkloads, ReferenceBytes, ::testing::ValuesIn(ref_cases()), [](const auto& info) {
  return info.param.workload + "_npus" + std::to_string(info.param.npus) + "_passes" +
         std::to_string(info.param.passes);
});

TEST(ReferenceBytes, CoversEveryWorkloadAndConfiguration) { EXPECT_EQ(ref_cases().size(), 24u); }

// The reference fails on HYBRID_TRANSFORMER without writing; so do both modes, exit 2 (CLI test).
TEST(ReferenceErrors, UnsupportedTransformerTypeFailsOnLine1WithNoOutput) {
  std::string expected =
      test::read_file(test::data_file("Transformer_HybridParallel/Transformer_HybridParallel.expected_error.txt"));
  ASSERT_NE(expected.find("Unsupported parallelism type, HYBRID_TRANSFORMER"), std::string::npos);
  for (bool compat : {true, false}) {
    TempDir td;
    std::string in = test::workload_txt("Transformer_HybridParallel"), msg;
    try {
      test::run_from_text(in, td.file("out"), 4, 2, compat);
    } catch (const InputError& e) {
      msg = e.what();
    }
    EXPECT_EQ(msg.rfind(in + ":1: unsupported parallelism type 'HYBRID_TRANSFORMER'", 0), 0u) << msg;
    EXPECT_EQ(std::system(("test -z \"$(ls -A '" + td.path() + "')\"").c_str()), 0) << "files written";
  }
}

// A copy of `w` whose first token (the parallelism type) is `type`.
std::string retyped(const std::string& w, const std::string& type, const TempDir& td) {
  std::string text = test::read_file(test::workload_txt(w));
  size_t end = text.find_first_of(" \t\r\n");
  std::string out = type + text.substr(end);
  test::write_file(td.file(w + "." + type + ".txt"), out);
  return td.file(w + "." + type + ".txt");
}

// The reference's HYBRID_MODEL_DATA is its HYBRID_DATA_MODEL except that the IG comm is named
// without the "_IG_COMM_" infix; no reference file exists for it, so the HYBRID_DATA_MODEL one
// is the oracle, renamed.
TEST(ReferenceDerived, HybridModelDataIsHybridDataModelWithPlainIgCommNames) {
  TempDir td;
  const std::string w = "MLP_HybridParallel_Data_Model";
  std::string in = retyped(w, "HYBRID_MODEL_DATA", td);
  test::run_from_text(in, td.file("out"), 4, 2, true);
  for (int k = 0; k < 4; ++k) {
    auto ours = test::parse_et(td.file("out." + std::to_string(k) + ".et"));
    auto ref = test::parse_et_bytes(test::reference_et(w, 4, 2, k));
    EXPECT_EQ(test::input_file_attr(ours).substr(0, 18), "HYBRID_MODEL_DATA\t");
    ASSERT_EQ(ours.nodes.size(), ref.nodes.size());
    size_t renamed = 0;
    for (size_t i = 0; i < ref.nodes.size(); ++i) {
      auto want = ref.nodes[i];
      std::string name = want.name();
      if (size_t p = name.find("_IG_COMM__"); p != std::string::npos) {
        want.set_name(name.replace(p, 10, "_"));
        ++renamed;
      }
      EXPECT_EQ(ours.nodes[i].SerializeAsString(), want.SerializeAsString())
          << "node " << i << ": " << ours.nodes[i].ShortDebugString();
    }
    EXPECT_EQ(renamed, 2u * 5u);  // 2 passes x (6 layers - layer 0)
  }
}

// HYBRID_DLRM_ENHANCED goes through the same reference code as HYBRID_DLRM.
TEST(ReferenceDerived, HybridDlrmEnhancedIsHybridDlrm) {
  TempDir td;
  const std::string w = "DLRM_HybridParallel";
  std::string in = retyped(w, "HYBRID_DLRM_ENHANCED", td);
  test::run_from_text(in, td.file("out"), 4, 2, true);
  for (int k = 0; k < 4; ++k) {
    auto ours = test::parse_et(td.file("out." + std::to_string(k) + ".et"));
    auto ref = test::parse_et_bytes(test::reference_et(w, 4, 2, k));
    ASSERT_EQ(ours.nodes.size(), ref.nodes.size());
    for (size_t i = 0; i < ref.nodes.size(); ++i)
      EXPECT_EQ(ours.nodes[i].SerializeAsString(), ref.nodes[i].SerializeAsString()) << "node " << i;
  }
}

}  // namespace
}  // namespace opf::chakra
