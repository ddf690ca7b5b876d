// What an op's test.cpp needs to check `opforge op OP` on bad input: a temp dir, .npy writers,
// one CLI run, and the contract every refusal keeps (exit 2, one line "opforge op: ..." naming the
// argument, nothing written). The CLI is found through OPFORGE_EXE, which `meson test` sets.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace opf::op_cli_check {

struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/opf_op_cli_XXXXXX";
    path = ::mkdtemp(t);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

// A little-endian C-order .npy file (format 1.0) of raw element bytes; descr e.g. "<f4", "<i8".
inline void write_npy(const std::string& path, const char* descr, const std::vector<int64_t>& shape, const void* data,
                      size_t bytes) {
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + ", ";
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  header.append(64 - (10 + header.size() + 1) % 64, ' ');
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  f.write("\x93NUMPY\x01\x00", 8);
  const uint16_t len = uint16_t(header.size());
  f.write(reinterpret_cast<const char*>(&len), 2);
  f << header;
  f.write(static_cast<const char*>(data), std::streamsize(bytes));
}

// An f32 .npy of the first prod(shape) values of v.
inline void write_npy(const std::string& path, const std::vector<int64_t>& shape, const std::vector<float>& v) {
  size_t n = 1;
  for (int64_t d : shape) n *= size_t(d);
  write_npy(path, "<f4", shape, v.data(), n * sizeof(float));
}

inline std::set<std::string> listing(const std::string& dir) {
  std::set<std::string> s;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) s.insert(e.path().filename().string());
  return s;
}

inline std::vector<std::string> cat(std::initializer_list<std::vector<std::string>> parts) {
  std::vector<std::string> v;
  for (const auto& part : parts) v.insert(v.end(), part.begin(), part.end());
  return v;
}

struct Result {
  int code = -1;
  std::string err;
};

// OPFORGE_EXE, or "" when the test does not run under `meson test` (the caller skips)
inline std::string exe() {
  const char* e = std::getenv("OPFORGE_EXE");
  return e && std::filesystem::exists(e) ? e : "";
}

// `opforge op OP ARGS...`, stdout and stderr kept in io/
inline Result opforge_op(const std::string& op, const std::string& io, const std::vector<std::string>& args) {
  std::string cmd = exe() + " op " + op;
  for (const auto& a : args) cmd += " '" + a + "'";  // test paths hold no quotes
  cmd += " > " + io + "/stdout 2> " + io + "/stderr";
  const int st = std::system(cmd.c_str());
  std::ifstream f(io + "/stderr");
  std::stringstream s;
  s << f.rdbuf();
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, s.str()};
}

struct BadCase {
  const char* what;
  std::vector<std::string> args;
  const char* names;  // what the error line must contain (the argument, param or cause)
};

// Each case is refused: exit 2, one line starting "opforge op: " that contains `names`, and
// `watched` (the directory holding the inputs and the --out target) has the same entries after.
// `tail` is appended to every case's arguments (e.g. {"--out", DIR}).
inline void expect_refused(const std::string& op, const std::vector<BadCase>& cases, const std::string& watched,
                           const std::vector<std::string>& tail = {}) {
  TempDir io;
  const auto before = listing(watched);
  for (const BadCase& bc : cases) {
    SCOPED_TRACE(bc.what);
    std::vector<std::string> args = bc.args;
    args.insert(args.end(), tail.begin(), tail.end());
    const Result r = opforge_op(op, io.path, args);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_EQ(r.err.rfind("opforge op: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(bc.names), std::string::npos) << r.err;
    EXPECT_EQ(listing(watched), before) << "no output dir, temp dir or file left";
  }
}

}  // namespace opf::op_cli_check

// First line of an `opforge op` test: skips (with the reason) outside `meson test`.
#define OPF_REQUIRE_OPFORGE_EXE()                                                                                      \
  do {                                                                                                                 \
    if (opf::op_cli_check::exe().empty()) GTEST_SKIP() << "OPFORGE_EXE not set or not built (run through meson test)"; \
  } while (0)
