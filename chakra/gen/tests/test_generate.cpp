// opforge chakra generate: every kind at several sizes, rank counts and seeds gives files the
// validator accepts (no errors, no warnings) and the simulator drains (every node issued); each
// kind has the shape it promises; bad options are one-line errors with no files.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <map>
#include <set>

#include "../../tests/test_util.h"
#include "et_generator.h"
#include "et_load.h"
#include "et_stream.h"
#include "input_error.h"
#include "simulator.h"
#include "validator.h"

namespace opf::chakra {
namespace {

using test::TempDir;
using NodeList = std::vector<ChakraProtoMsg::Node>;

NodeList nodes_of(const std::string& path) {
  EtReader r(path, false);
  ChakraProtoMsg::GlobalMetadata m;
  EXPECT_TRUE(r.next(m));
  NodeList out;
  ChakraProtoMsg::Node n;
  while (r.next(n)) out.push_back(n);
  return out;
}

GenerateOptions opts(const std::string& kind, uint64_t nodes, uint64_t ranks, uint64_t seed) {
  GenerateOptions o;
  o.kind = kind;
  o.nodes = nodes;
  o.ranks = ranks;
  o.seed = seed;
  return o;
}

struct GenCase {
  std::string kind;
  uint64_t nodes, ranks, seed;
};

std::vector<GenCase> gen_cases() {
  std::vector<GenCase> v;
  for (const char* k : {"all-types", "chain", "fan", "dag", "collectives"})
    for (uint64_t n : {7, 8, 100, 5000})
      for (uint64_t r : {1, 3})
        for (uint64_t s : {0, 12345}) v.push_back({k, n, r, s});
  for (const char* k : {"chain", "fan", "dag"}) v.push_back({k, 1, 1, 9});
  v.push_back({"fan", 2, 2, 9});
  v.push_back({"collectives", 2, 4, 9});
  return v;
}

class EveryKind : public ::testing::TestWithParam<GenCase> {};

TEST_P(EveryKind, ValidatesWithoutIssuesAndDrainsInTheSimulator) {
  const GenCase& c = GetParam();
  TempDir td;
  generate(opts(c.kind, c.nodes, c.ranks, c.seed), td.file("g"));
  for (uint64_t r = 0; r < c.ranks; ++r) {
    LoadedEt et;
    load_et(td.file("g." + std::to_string(r) + ".et"), false, et);
    EXPECT_EQ(et.nodes.size(), c.nodes);
    EXPECT_TRUE(et.type_problems.empty());
    ValidateOptions vo;
    vo.ctrl_dangling_is_error = true;
    for (const auto& is : validate_graph(et.nodes, vo))
      ADD_FAILURE() << "rank " << r << ": " << is.where << ": " << is.problem;
    for (const auto& is : validate_metadata(et.meta))
      ADD_FAILURE() << "rank " << r << ": " << is.where << ": " << is.problem;
    SimResult res = simulate(et.nodes, [](const std::string&) {});
    EXPECT_EQ(res.issued, c.nodes) << "rank " << r << ": the simulation stalled";
  }
  EXPECT_FALSE(test::exists(td.file("g." + std::to_string(c.ranks) + ".et")));
}

INSTANTIATE_TEST_SUITE_P(Generate, EveryKind, ::testing::ValuesIn(gen_cases()), [](const auto& info) {
  std::string k = info.param.kind;
  for (char& ch : k)
    if (ch == '-') ch = '_';
  return k + "_n" + std::to_string(info.param.nodes) + "_r" + std::to_string(info.param.ranks) + "_s" +
         std::to_string(info.param.seed);
});

TEST(AllTypes, EveryNodeTypeEveryAttributeKindAndEveryNodeField) {
  TempDir td;
  generate(opts("all-types", 7, 1, 3), td.file("a"));
  NodeList nodes = nodes_of(td.file("a.0.et"));
  std::set<int> types;
  std::set<int> kinds;
  std::set<std::string> fields;
  const auto* node_desc = ChakraProtoMsg::Node::descriptor();
  const auto* refl = ChakraProtoMsg::Node::GetReflection();
  for (const auto& n : nodes) {
    types.insert(n.type());
    for (const auto& a : n.attr()) kinds.insert(a.value_case());
    for (int f = 0; f < node_desc->field_count(); ++f) {
      const auto* fd = node_desc->field(f);
      if (fd->is_repeated() ? refl->FieldSize(n, fd) > 0 : refl->HasField(n, fd)) fields.insert(fd->name());
    }
  }
  // every NodeType value but INVALID_NODE
  const auto* type_enum = ChakraProtoMsg::NodeType_descriptor();
  for (int v = 0; v < type_enum->value_count(); ++v) {
    if (type_enum->value(v)->number() == ChakraProtoMsg::INVALID_NODE) continue;
    EXPECT_TRUE(types.count(type_enum->value(v)->number())) << type_enum->value(v)->name();
  }
  // every field of the AttributeProto value oneof
  const auto* oneof = ChakraProtoMsg::AttributeProto::descriptor()->FindOneofByName("value");
  ASSERT_TRUE(oneof);
  for (int f = 0; f < oneof->field_count(); ++f)
    EXPECT_TRUE(kinds.count(oneof->field(f)->number())) << oneof->field(f)->name();
  for (int f = 0; f < node_desc->field_count(); ++f)
    EXPECT_TRUE(fields.count(node_desc->field(f)->name())) << node_desc->field(f)->name();
}

TEST(AllTypes, NothingDependsOnAMetadataNode) {
  TempDir td;
  generate(opts("all-types", 50, 1, 1), td.file("a"));
  NodeList nodes = nodes_of(td.file("a.0.et"));
  std::set<uint64_t> metadata;
  for (const auto& n : nodes)
    if (n.type() == ChakraProtoMsg::METADATA_NODE) metadata.insert(n.id());
  EXPECT_EQ(metadata.size(), 8u);  // nodes 0, 7, ..., 49
  for (const auto& n : nodes) {
    for (uint64_t d : n.data_deps()) EXPECT_FALSE(metadata.count(d)) << n.name();
    for (uint64_t d : n.ctrl_deps()) EXPECT_FALSE(metadata.count(d)) << n.name();
  }
}

int64_t int_attr(const ChakraProtoMsg::Node& n, const std::string& name) {
  for (const auto& a : n.attr())
    if (a.name() == name) return a.has_int32_val() ? a.int32_val() : a.int64_val();
  ADD_FAILURE() << n.name() << " has no " << name;
  return -1;
}

// Every send has a receive on its destination rank with the same tag and size, from the sender.
TEST(AllTypes, SendsAndReceivesPairUpAcrossRanks) {
  TempDir td;
  const uint64_t ranks = 4;
  generate(opts("all-types", 30, ranks, 8), td.file("a"));
  std::map<std::tuple<int64_t, int64_t, int64_t>, int64_t> sends, recvs;  // (from, to, tag) -> size
  for (uint64_t r = 0; r < ranks; ++r)
    for (const auto& n : nodes_of(td.file("a." + std::to_string(r) + ".et"))) {
      if (n.type() == ChakraProtoMsg::COMM_SEND_NODE)
        sends[{int64_t(r), int_attr(n, "comm_dst"), int_attr(n, "comm_tag")}] = int_attr(n, "comm_size");
      if (n.type() == ChakraProtoMsg::COMM_RECV_NODE)
        recvs[{int_attr(n, "comm_src"), int64_t(r), int_attr(n, "comm_tag")}] = int_attr(n, "comm_size");
    }
  EXPECT_EQ(sends.size(), ranks * 4);  // nodes 4, 11, 18, 25 per rank
  EXPECT_EQ(sends, recvs);
}

TEST(Chain, EachNodeDependsOnThePreviousOne) {
  TempDir td;
  generate(opts("chain", 40, 1, 2), td.file("c"));
  NodeList nodes = nodes_of(td.file("c.0.et"));
  ASSERT_EQ(nodes.size(), 40u);
  EXPECT_EQ(nodes[0].data_deps_size(), 0);
  for (size_t i = 1; i < nodes.size(); ++i) {
    ASSERT_EQ(nodes[i].data_deps_size(), 1);
    EXPECT_EQ(nodes[i].data_deps(0), nodes[i - 1].id());
  }
}

TEST(Fan, RootThenIndependentNodesThenASinkAfterAll) {
  TempDir td;
  generate(opts("fan", 10, 1, 2), td.file("f"));
  NodeList nodes = nodes_of(td.file("f.0.et"));
  ASSERT_EQ(nodes.size(), 10u);
  for (size_t i = 1; i + 1 < nodes.size(); ++i) {
    EXPECT_EQ(nodes[i].data_deps_size(), 1);
    EXPECT_EQ(nodes[i].data_deps(0), 0u);
  }
  EXPECT_EQ(nodes.back().data_deps_size(), 8);
  // the simulator's single CPU runs the middle nodes one after another: makespan = sum of durations
  LoadedEt et;
  load_et(td.file("f.0.et"), false, et);
  uint64_t sum = 0;
  for (const auto& n : nodes) sum += std::max<uint64_t>(n.duration_micros(), 1);
  EXPECT_EQ(simulate(et.nodes, [](const std::string&) {}).makespan, sum);
}

TEST(Dag, DepsPointBackwardWithinTheWindowAndSomeCtrlDeps) {
  TempDir td;
  generate(opts("dag", 2000, 1, 4), td.file("d"));
  NodeList nodes = nodes_of(td.file("d.0.et"));
  size_t ctrl = 0, multi = 0;
  for (const auto& n : nodes) {
    for (uint64_t d : n.data_deps()) {
      EXPECT_LT(d, n.id());
      EXPECT_LE(n.id() - d, 16u);
    }
    for (uint64_t d : n.ctrl_deps()) EXPECT_LT(d, n.id());
    ctrl += n.ctrl_deps_size() > 0;
    multi += n.data_deps_size() > 1;
  }
  EXPECT_GT(ctrl, 300u);  // about a quarter
  EXPECT_LT(ctrl, 700u);
  EXPECT_GT(multi, 500u);
}

TEST(Collectives, EveryRankHasTheSameCollectivesInTheSameOrder) {
  TempDir td;
  const uint64_t ranks = 5;
  generate(opts("collectives", 41, ranks, 77), td.file("c"));
  std::vector<std::vector<std::pair<int64_t, int64_t>>> seqs(ranks);
  std::vector<std::vector<uint64_t>> durations(ranks);
  std::set<int64_t> types;
  for (uint64_t r = 0; r < ranks; ++r) {
    int64_t last_coll = -1;
    for (const auto& n : nodes_of(td.file("c." + std::to_string(r) + ".et"))) {
      if (n.type() == ChakraProtoMsg::COMP_NODE) durations[r].push_back(n.duration_micros());
      if (n.type() != ChakraProtoMsg::COMM_COLL_NODE) continue;
      seqs[r].emplace_back(int_attr(n, "comm_type"), int_attr(n, "comm_size"));
      types.insert(int_attr(n, "comm_type"));
      // ordered: each collective waits for the previous one
      if (last_coll >= 0) {
        EXPECT_NE(std::find(n.data_deps().begin(), n.data_deps().end(), uint64_t(last_coll)), n.data_deps().end());
      }
      last_coll = int64_t(n.id());
    }
  }
  EXPECT_EQ(seqs[0].size(), 20u);
  EXPECT_GE(types.size(), 3u);
  for (uint64_t r = 1; r < ranks; ++r) {
    EXPECT_EQ(seqs[r], seqs[0]) << "rank " << r;
    EXPECT_NE(durations[r], durations[0]) << "ranks' compute times should differ";
  }
}

TEST(Seeds, SameOptionsSameBytesOtherSeedOtherBytes) {
  for (const char* kind : {"all-types", "chain", "fan", "dag", "collectives"}) {
    std::string a = generate_rank(opts(kind, 64, 2, 1), 1), b = generate_rank(opts(kind, 64, 2, 1), 1);
    std::string c = generate_rank(opts(kind, 64, 2, 2), 1);
    EXPECT_TRUE(a == b) << kind;
    EXPECT_FALSE(a == c) << kind;
  }
}

TEST(BadOptions, OneLineNamingTheOptionAndNoFiles) {
  struct Bad {
    GenerateOptions o;
    std::string expect;
  } cases[] = {
      {opts("tree", 10, 1, 0), "--kind: unknown kind 'tree' (one of: all-types, chain, fan, dag, collectives)"},
      {opts("chain", 0, 1, 0), "--nodes: 0 is out of range"},
      {opts("all-types", 6, 1, 0), "--nodes: 6 is out of range: all-types needs 7"},
      {opts("collectives", 1, 1, 0), "--nodes: 1 is out of range: collectives needs 2"},
      {opts("chain", 10'000'001, 1, 0), "--nodes: 10000001 is out of range"},
      {opts("chain", 10, 0, 0), "--ranks: 0 is out of range"},
  };
  for (const auto& c : cases) {
    TempDir td;
    std::string msg;
    try {
      generate(c.o, td.file("g"));
    } catch (const InputError& e) {
      msg = e.what();
    }
    EXPECT_EQ(msg.rfind(c.expect, 0), 0u) << msg;
    EXPECT_EQ(std::system(("test -z \"$(ls -A '" + td.path() + "')\"").c_str()), 0);
  }
}

// ---- through the binary: generate, then the project's own validate and simulate

int run(const std::string& args, std::string* out = nullptr) {
  std::string cmd = std::string(std::getenv("OPFORGE_EXE")) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string text;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) text.append(buf, n);
  int st = pclose(p);
  if (out) *out = text;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

TEST(Cli, GeneratedFilesPassValidateAndSimulate) {
  if (!std::getenv("OPFORGE_EXE")) GTEST_SKIP() << "OPFORGE_EXE (path of the opforge binary) not set";
  TempDir td;
  std::string out;
  ASSERT_EQ(run("chakra generate --kind collectives --nodes 30 --ranks 2 --seed 3 -o " + td.file("c")), 0);
  EXPECT_EQ(run("chakra validate " + td.file("c.0.et") + " " + td.file("c.1.et"), &out), 0) << out;
  EXPECT_NE(out.find("c.1.et: 30 nodes, 0 errors, 0 warnings"), std::string::npos) << out;
  EXPECT_EQ(run("chakra simulate " + td.file("c.1.et"), &out), 0) << out;
  EXPECT_NE(out.find("Simulation of Chakra node execution completed."), std::string::npos);
  EXPECT_EQ(run("chakra generate --kind nope -o " + td.file("x"), &out), 2);
  EXPECT_EQ(out, "opforge: --kind: unknown kind 'nope' (one of: all-types, chain, fan, dag, collectives)\n");
  EXPECT_FALSE(test::exists(td.file("x.0.et")));
}

}  // namespace
}  // namespace opf::chakra
