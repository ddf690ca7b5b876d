// The default mode of from-text: one test per reference bug it fixes (data/SOURCES.md lists
// them), checked against the reference's own outputs where the fix must not change the graph,
// and the outputs' validity (validator) and completeness (simulator drains every node).
#include <gtest/gtest.h>

#include <set>

#include "et_load.h"
#include "input_error.h"
#include "simulator.h"
#include "text_test_util.h"
#include "validator.h"

namespace opf::chakra {
namespace {

using test::TempDir;

// One layer line: name, reserved, then (time, comm type, comm size) for FWD, IG, WG, update.
std::string layer(const std::string& name, const std::string& fwd, const std::string& ig, const std::string& wg,
                  const std::string& sep = "\t") {
  auto cols = [&](const std::string& s) {
    std::string o;
    for (char c : s) o += c == ' ' ? sep : std::string(1, c);
    return o;
  };
  return name + sep + "-1" + sep + cols(fwd) + sep + cols(ig) + sep + cols(wg) + sep + "7\n";
}

std::string write_workload(const TempDir& td, const std::string& name, const std::string& text) {
  test::write_file(td.file(name), text);
  return td.file(name);
}

const ChakraProtoMsg::Node* by_name(const test::EtFile& f, const std::string& name) {
  for (const auto& n : f.nodes)
    if (n.name() == name) return &n;
  return nullptr;
}

// ---- the graph itself is the reference's where no bug is involved

class SameGraphAsReference : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

// None of the shared workloads has a NONE comm in a column its type models, a wrong layer count
// or a blank line, so the default graph must be the reference's NPU-0 graph: same ids, types,
// durations, dependencies and comm attributes; only the names differ.
TEST_P(SameGraphAsReference, NodeForNodeExceptNames) {
  auto [w, passes] = GetParam();
  TempDir td;
  std::vector<std::string> warnings;
  test::run_from_text(test::workload_txt(w), td.file("out"), 1, passes, false, &warnings);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  auto ours = test::parse_et(td.file("out.0.et"));
  auto ref = test::parse_et_bytes(test::reference_et(w, 1, passes, 0));
  EXPECT_EQ(ours.meta.SerializeAsString(), ref.meta.SerializeAsString());
  ASSERT_EQ(ours.nodes.size(), ref.nodes.size());
  for (size_t i = 0; i < ref.nodes.size(); ++i)
    EXPECT_EQ(test::structure(ours.nodes[i]), test::structure(ref.nodes[i])) << ours.nodes[i].name();
}

INSTANTIATE_TEST_SUITE_P(TextWorkloads, SameGraphAsReference,
                         ::testing::Combine(::testing::ValuesIn(test::reference_workloads()), ::testing::Values(1, 2)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_passes" + std::to_string(std::get<1>(info.param));
                         });

// ---- bug 1: ids continue across NPUs

TEST(DefaultMode, IdsStartAtZeroInEveryNpuFile) {
  TempDir td;
  test::run_from_text(test::workload_txt("MLP_ModelParallel"), td.file("out"), 4, 2, false);
  std::string first = test::read_file(td.file("out.0.et"));
  auto f = test::parse_et(td.file("out.0.et"));
  for (size_t i = 0; i < f.nodes.size(); ++i) ASSERT_EQ(f.nodes[i].id(), i);
  for (int k = 1; k < 4; ++k) EXPECT_TRUE(test::read_file(td.file("out." + std::to_string(k) + ".et")) == first) << k;
  // the reference's NPU 3 starts where NPU 2 ended
  auto ref3 = test::parse_et_bytes(test::reference_et("MLP_ModelParallel", 4, 2, 3));
  EXPECT_EQ(ref3.nodes.front().id(), 3 * f.nodes.size());
}

// ---- bug 2: NONE (and unknown types) became ALL_REDUCE comm nodes

TEST(DefaultMode, NoCommNodeForNoneAndDependentsWaitForItsProducer) {
  TempDir td;
  std::string in = write_workload(td, "d.txt",
                                  "DATA\n2\n" + layer("a", "10 NONE 0", "11 NONE 0", "12 ALLREDUCE 64") +
                                      layer("b", "20 NONE 0", "21 NONE 0", "22 NONE 0"));
  test::run_from_text(in, td.file("def"), 1, 2, false);
  test::run_from_text(in, td.file("ref"), 1, 2, true);
  auto def = test::parse_et(td.file("def.0.et")), ref = test::parse_et(td.file("ref.0.et"));
  // the reference: a comm node "COMM_COLL_NODE_b_NONE" of type ALL_REDUCE (0), size 0, per pass
  size_t none_nodes = 0;
  for (const auto& n : ref.nodes) none_nodes += n.name() == "COMM_COLL_NODE_b_NONE";
  EXPECT_EQ(none_nodes, 2u);
  EXPECT_EQ(def.nodes.size(), ref.nodes.size() - 2);
  for (const auto& n : def.nodes) EXPECT_EQ(n.name().find("NONE"), std::string::npos) << n.name();
  // pass 2's FWD of b waits for pass 1's BWD_WG of b (the WG comm's producer) and FWD of a
  const auto* fwd_b = by_name(def, "COMP_NODE_b_FWD_PASS1");
  const auto* wg_b = by_name(def, "COMP_NODE_b_BWD_WG_PASS0");
  const auto* fwd_a = by_name(def, "COMP_NODE_a_FWD_PASS1");
  ASSERT_TRUE(fwd_b && wg_b && fwd_a);
  EXPECT_EQ(std::vector<uint64_t>(fwd_b->data_deps().begin(), fwd_b->data_deps().end()),
            (std::vector<uint64_t>{fwd_a->id(), wg_b->id()}));
}

TEST(DefaultMode, ModelForwardNoneChainsTheComputeNodesDirectly) {
  TempDir td;
  std::string in = write_workload(td, "m.txt",
                                  "MODEL\n2\n" + layer("a", "10 NONE 0", "11 ALLREDUCE 8", "12 NONE 0") +
                                      layer("b", "20 ALLGATHER 16", "21 NONE 0", "22 NONE 0"));
  test::run_from_text(in, td.file("def"), 1, 1, false);
  auto def = test::parse_et(td.file("def.0.et"));
  // FWD a -> FWD b -> comm b (ALLGATHER) -> BWD_IG b -> {BWD_WG b, BWD_IG a (after WG b and IG b)}
  std::vector<std::string> names;
  for (const auto& n : def.nodes) names.push_back(n.name());
  EXPECT_EQ(names, (std::vector<std::string>{"COMP_NODE_a_FWD", "COMP_NODE_b_FWD", "COMM_COLL_NODE_b_FWD_ALLGATHER",
                                             "COMP_NODE_b_BWD_IG", "COMP_NODE_b_BWD_WG", "COMP_NODE_a_BWD_IG",
                                             "COMP_NODE_a_BWD_WG"}));
  EXPECT_EQ(def.nodes[1].data_deps(0), 0u);
  // BWD_IG a: BWD_WG b, then BWD_IG b in place of b's (NONE) IG comm
  EXPECT_EQ(std::vector<uint64_t>(def.nodes[5].data_deps().begin(), def.nodes[5].data_deps().end()),
            (std::vector<uint64_t>{4, 3}));
}

// ---- bug 3: a blank or whitespace-only line crashes the reference

TEST(DefaultMode, BlankLinesAnywhereAreSkipped) {
  TempDir td;
  std::string text = test::read_file(test::workload_txt("MLP_ModelParallel"));
  // CRLF file: blank lines before the type, between header lines and layers, and at the end
  std::string blanky = "\r\n  \t\r\n" + text;
  size_t second = blanky.find("\r\n", blanky.find("MODEL")) + 2;
  blanky.insert(second, "\r\n");
  size_t third = blanky.find("layer_64_1_mlp2");
  blanky.insert(third, " \r\n\r\n");
  blanky += "\r\n\r\n\t\r\n";
  std::string in = write_workload(td, "b.txt", blanky);
  test::run_from_text(test::workload_txt("MLP_ModelParallel"), td.file("plain"), 1, 2, false);
  test::run_from_text(in, td.file("blank"), 1, 2, false);
  auto plain = test::parse_et(td.file("plain.0.et")), blank = test::parse_et(td.file("blank.0.et"));
  ASSERT_EQ(plain.nodes.size(), blank.nodes.size());
  for (size_t i = 0; i < plain.nodes.size(); ++i)
    EXPECT_EQ(plain.nodes[i].SerializeAsString(), blank.nodes[i].SerializeAsString());
  // the reference fails on the first blank line after the header (line 1 is blank here: no type)
  std::string msg;
  try {
    test::run_from_text(in, td.file("ref"), 1, 1, true);
  } catch (const InputError& e) {
    msg = e.what();
  }
  EXPECT_EQ(msg.rfind(in + ":1: no parallelism type", 0), 0u) << msg;
}

// ---- bug 4: the header's layer count decides which layer has no IG comm

TEST(DefaultMode, LayerCountComesFromTheFileWithAWarning) {
  const std::string w = "MLP_ModelParallel";
  std::string text = test::read_file(test::workload_txt(w));
  for (const char* count : {"9", "3"}) {
    TempDir td;
    std::string t = text;
    t.replace(t.find("\n6") + 1, 1, count);
    std::string in = write_workload(td, "c.txt", t);
    std::vector<std::string> warnings;
    test::run_from_text(in, td.file("def"), 1, 1, false, &warnings);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_EQ(warnings[0].rfind(in + ":2: the layer count says " + count + " but the file has 6", 0), 0u)
        << warnings[0];
    auto def = test::parse_et(td.file("def.0.et"));
    auto ref = test::parse_et_bytes(test::reference_et(w, 1, 1, 0));
    ASSERT_EQ(def.nodes.size(), ref.nodes.size());
    for (size_t i = 0; i < ref.nodes.size(); ++i)
      EXPECT_EQ(test::structure(def.nodes[i]), test::structure(ref.nodes[i]));
  }
}

TEST(CompatMode, HeaderLayerCountTooLargeGivesLayer0AnIgCommTooSmallFails) {
  const std::string w = "MLP_ModelParallel";
  std::string text = test::read_file(test::workload_txt(w));
  TempDir td;
  std::string big = text, small = text;
  big.replace(big.find("\n6") + 1, 1, "9");
  small.replace(small.find("\n6") + 1, 1, "3");
  test::run_from_text(write_workload(td, "big.txt", big), td.file("big"), 1, 1, true);
  auto f = test::parse_et(td.file("big.0.et"));
  auto ref = test::parse_et_bytes(test::reference_et(w, 1, 1, 0));
  EXPECT_EQ(f.nodes.size(), ref.nodes.size() + 1);
  EXPECT_TRUE(by_name(f, "COMM_COLL_NODE_layer_64_1_mlp0_ALLREDUCE"));
  std::string in = write_workload(td, "small.txt", small), msg;
  try {
    test::run_from_text(in, td.file("small"), 1, 1, true);
  } catch (const InputError& e) {
    msg = e.what();
  }
  // the layer at backward index 2 (line 6) has no IG comm; the next one (line 5) needs it
  EXPECT_EQ(msg.rfind(in + ":5: the reference converter fails here", 0), 0u) << msg;
  EXPECT_FALSE(test::exists(td.file("small.0.et")));
}

// ---- bug 6: node names are not unique

TEST(DefaultMode, NodeNamesAreUniqueInEveryFile) {
  TempDir td;
  std::string hmd = test::read_file(test::workload_txt("MLP_HybridParallel_Data_Model"));
  hmd.replace(0, hmd.find('\t'), "HYBRID_MODEL_DATA");
  std::vector<std::string> inputs = {write_workload(td, "hmd.txt", hmd)};
  for (const auto& w : test::reference_workloads()) inputs.push_back(test::workload_txt(w));
  for (size_t k = 0; k < inputs.size(); ++k) {
    for (int passes : {1, 3}) {
      std::string prefix = td.file("u" + std::to_string(k) + "p" + std::to_string(passes));
      test::run_from_text(inputs[k], prefix, 1, passes, false);
      auto f = test::parse_et(prefix + ".0.et");
      std::set<std::string> names;
      for (const auto& n : f.nodes) EXPECT_TRUE(names.insert(n.name()).second) << inputs[k] << ": " << n.name();
    }
  }
  // the reference repeats names within one pass for HYBRID_MODEL_DATA (IG and WG ALLREDUCE)
  // and DLRM (the embedding all-to-all forward and backward)
  for (const auto& in : {inputs[0], test::workload_txt("DLRM_HybridParallel")}) {
    test::run_from_text(in, td.file("ref"), 1, 1, true);
    auto f = test::parse_et(td.file("ref.0.et"));
    std::set<std::string> names;
    size_t dups = 0;
    for (const auto& n : f.nodes) dups += !names.insert(n.name()).second;
    EXPECT_GT(dups, 0u) << in;
  }
  auto dlrm = test::parse_et(td.file("u2p3.0.et"));  // inputs[2] is DLRM_HybridParallel
  EXPECT_TRUE(by_name(dlrm, "COMM_COLL_NODE_Embedding_FWD_ALLTOALL_PASS2"));
  EXPECT_TRUE(by_name(dlrm, "COMM_COLL_NODE_Embedding_IG_ALLTOALL_PASS2"));
}

// ---- bug 7: partial output

TEST(DefaultMode, AnErrorOnTheLastLineWritesNothingAndKeepsExistingFiles) {
  for (bool compat : {false, true}) {
    TempDir td;
    std::string text = test::read_file(test::workload_txt("Resnet50_DataParallel"));
    // the last layer's forward time made negative: the reference has written most of NPU 0 by then
    size_t last = text.rfind("\r\n") + 2;
    size_t col = text.find('\t', text.find('\t', last) + 1) + 1;
    text.insert(col, "-");
    std::string in = write_workload(td, "neg.txt", text);
    test::write_file(td.file("out.0.et"), "precious");
    std::string msg;
    try {
      test::run_from_text(in, td.file("out"), 4, 2, compat);
    } catch (const InputError& e) {
      msg = e.what();
    }
    EXPECT_EQ(msg.rfind(in + ":56: ", 0), 0u) << msg;
    EXPECT_EQ(test::read_file(td.file("out.0.et")), "precious");
    EXPECT_EQ(std::system(("test \"$(ls -A '" + td.path() + "' | wc -l)\" -eq 2").c_str()), 0) << "stray files";
  }
}

TEST(CompatMode, ZeroPassesWritesMetadataOnlyFilesLikeTheReference) {
  TempDir td;
  test::run_from_text(test::workload_txt("microAllReduce"), td.file("z"), 2, 0, true);
  for (int k = 0; k < 2; ++k) {
    auto f = test::parse_et(td.file("z." + std::to_string(k) + ".et"));
    EXPECT_TRUE(f.nodes.empty());
    EXPECT_EQ(test::input_file_attr(f),
              test::input_file_attr(test::parse_et_bytes(test::reference_et("microAllReduce", 1, 1, 0))));
  }
}

// ---- DLRM (bug 5) and the options: see test_from_text_bad_input.cpp

// ---- every output is a graph the project's validator accepts and its simulator drains

TEST(DefaultMode, EveryOutputValidatesAndDrainsInTheSimulator) {
  TempDir td;
  for (const auto& w : test::reference_workloads())
    for (int passes : {1, 2}) {
      std::string prefix = td.file(w + std::to_string(passes));
      test::run_from_text(test::workload_txt(w), prefix, 1, passes, false);
      LoadedEt et;
      load_et(prefix + ".0.et", false, et);
      ValidateOptions vo;
      vo.ctrl_dangling_is_error = true;
      for (const auto& is : validate_graph(et.nodes, vo)) ADD_FAILURE() << w << ": " << is.where << ": " << is.problem;
      for (const auto& is : validate_metadata(et.meta)) ADD_FAILURE() << w << ": " << is.where << ": " << is.problem;
      auto res = simulate(et.nodes, [](const std::string&) {});
      EXPECT_EQ(res.issued, et.nodes.size()) << w;
      EXPECT_GT(res.makespan, 0u) << w;
    }
}

}  // namespace
}  // namespace opf::chakra
