// Helpers for the chakra tests: temp dirs, writing small synthetic traces, reading files,
// the trace corpus location (chakra/tests/data/traces; a test fails when it is missing).
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "common/temp_dir.h"
#include "regress.h"

namespace opf::chakra::test {

inline std::string traces_dir() { return default_traces_dir(); }

inline bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

#define OPF_REQUIRE_TRACES()                                                                                          \
  do {                                                                                                                \
    if (!::opf::chakra::test::exists(::opf::chakra::test::traces_dir()))                                              \
      FAIL() << "trace corpus " << ::opf::chakra::test::traces_dir() << " is missing (it is part of the repository)"; \
  } while (0)

// A scratch directory per test (under $TMPDIR or /tmp), removed with its contents.
struct TempDir : files::TempDir {
  TempDir() : files::TempDir("opf-chakra-test-") {}
};

// Runs one `opforge chakra regress` case (goldens in chakra/tests/golden) and expects it to
// match; a missing corpus or input fails.
inline void expect_regress_case(const std::string& name) {
  OPF_REQUIRE_TRACES();
  RegressOptions o;
  o.traces_dir = traces_dir();
  o.golden_dir = OPF_CHAKRA_GOLDEN_DIR;
  o.only = name;
  auto res = regress(o);
  ASSERT_EQ(res.size(), 1u);
  std::string msgs;
  for (const auto& m : res[0].messages) msgs += "\n  " + m;
  EXPECT_TRUE(res[0].ok) << msgs;
}

inline void write_file(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  f << data;
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// One node of a nested-format (1.0.2+) host ET / linked trace. `extra` is appended inside the
// object (e.g. "\"cat\": \"kernel\", \"stream\": 7").
inline std::string et_node(long long id, const std::string& name, const std::string& parent,
                           const std::string& extra = "",
                           const std::string& inputs = R"J({"values": [], "shapes": [], "types": []})J",
                           long long tid = 1) {
  std::string s =
      "{\"id\": " + std::to_string(id) + ", \"name\": \"" + name + "\", \"ctrl_deps\": " + parent +
      ", \"inputs\": " + inputs + R"J(, "outputs": {"values": [], "shapes": [], "types": []}, "attrs": [)J" +
      R"J({"name": "rf_id", "type": "uint64", "value": )J" + std::to_string(id) + "}, " +
      R"J({"name": "fw_parent", "type": "uint64", "value": 0}, {"name": "seq_id", "type": "int64", "value": -1}, )J" +
      R"J({"name": "scope", "type": "uint64", "value": 0}, {"name": "tid", "type": "uint64", "value": )J" +
      std::to_string(tid) + R"J(}, {"name": "fw_tid", "type": "uint64", "value": 0}, )J" +
      R"J({"name": "op_schema", "type": "string", "value": ""}])J";
  if (!extra.empty()) s += ", " + extra;
  return s + "}";
}

inline std::string et_trace(const std::string& nodes, const std::string& schema = "1.0.2-chakra.0.0.4") {
  return "{\"schema\": \"" + schema +
         "\", \"pid\": 7, \"time\": \"2024-01-01 00:00:00\", \"start_ts\": 100, \"nodes\": [" + nodes +
         "], \"finish_ts\": 200}";
}

// process root 1, thread root 2, ops 3.. on that thread (a valid little raw host ET)
inline std::string small_host_nodes() {
  return et_node(1, "[pytorch|profiler|execution_trace|process]", "1") + ", " +
         et_node(2, "[pytorch|profiler|execution_trace|thread]", "1") + ", " + et_node(3, "aten::mm", "2") + ", " +
         et_node(4, "aten::relu", "2");
}

}  // namespace opf::chakra::test
