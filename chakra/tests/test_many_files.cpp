// Many files at once (-j): convert, validate and from-text give the same files and the same
// report in the same order whatever -j is, a bad file fails alone, and the worker pool visits
// every file once.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <atomic>
#include <cstdio>
#include <vector>

#include "byte_source.h"
#include "parallel_files.h"
#include "test_util.h"

namespace opf::chakra {
namespace {

using test::TempDir;

struct CliRun {
  int rc;
  std::string out, err;
};

CliRun run_cli(const std::string& args, const TempDir& td) {
  const std::string err = td.file("stderr.txt");
  std::string cmd = std::string(std::getenv("OPFORGE_EXE")) + " " + args + " 2>" + err;
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128, out, test::read_file(err)};
}

class ManyFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::getenv("OPFORGE_EXE")) GTEST_SKIP() << "OPFORGE_EXE (path of the opforge binary) not set";
  }
};

TEST(ForEachFile, VisitsEveryIndexOnceForAnyJobCount) {
  for (int jobs : {0, 1, 2, 5, 64}) {
    std::vector<std::atomic<int>> hits(37);
    for_each_file(hits.size(), jobs, [&](size_t k) { ++hits[k]; });
    for (size_t k = 0; k < hits.size(); ++k) EXPECT_EQ(hits[k].load(), 1) << "jobs " << jobs << " index " << k;
  }
  EXPECT_EQ(resolve_jobs(8, 3), 3u);
  EXPECT_EQ(resolve_jobs(1, 3), 1u);
  EXPECT_GE(resolve_jobs(0, 1000), 1u);
  EXPECT_EQ(resolve_jobs(0, 0), 1u);
}

TEST_F(ManyFiles, ConvertGivesTheSameBytesWithAnyJobsAndABadPairFailsAlone) {
  TempDir td;
  const std::string real =
      std::string(OPF_CHAKRA_TEST_DATA) + "/traces/mlcommons-chakra/host_et_1.0.2-chakra.0.0.4.json.gz";
  test::write_file(td.file("small.json"), test::et_trace(test::small_host_nodes()));
  test::write_file(td.file("bad.json"), "{\"schema\": ");
  std::string args1, args2;
  const char* ins[] = {"real", "small", "bad", "real2"};
  for (const char* in : ins) {
    std::string src = std::string(in) == "small" ? td.file("small.json")
                      : std::string(in) == "bad" ? td.file("bad.json")
                                                 : real;
    args1 += " " + src + " " + td.file(std::string(in) + ".j1.et");
    args2 += " " + src + " " + td.file(std::string(in) + ".j2.et");
  }
  CliRun a = run_cli("chakra convert -j 1" + args1, td), b = run_cli("chakra convert -j 2" + args2, td);
  EXPECT_EQ(a.rc, 1);
  EXPECT_EQ(b.rc, 1);
  EXPECT_NE(b.err.find("bad.json"), std::string::npos) << b.err;
  EXPECT_FALSE(test::exists(td.file("bad.j2.et")));
  for (const char* in : {"real", "small", "real2"}) {
    const std::string x = test::read_file(td.file(std::string(in) + ".j1.et"));
    EXPECT_FALSE(x.empty()) << in;
    EXPECT_TRUE(x == test::read_file(td.file(std::string(in) + ".j2.et"))) << in;
  }
  // default -j (one per core) too
  EXPECT_EQ(
      run_cli("chakra convert " + real + " " + td.file("d.et") + " " + td.file("small.json") + " " + td.file("d2.et"),
              td)
          .rc,
      0);
  EXPECT_TRUE(test::read_file(td.file("d.et")) == test::read_file(td.file("real.j1.et")));
}

TEST_F(ManyFiles, ValidateReportsInInputOrderWhateverTheJobs) {
  TempDir td;
  const std::string d = std::string(OPF_TEXT_DATA) + "/";
  std::string files;
  for (const char* w :
       {"DLRM_HybridParallel/DLRM_HybridParallel.npus4.passes2.", "MLP_ModelParallel/MLP_ModelParallel.npus4.passes1."})
    for (int k = 0; k < 4; ++k) files += " " + d + w + std::to_string(k) + ".et.gz";
  test::write_file(td.file("broken.et"), std::string("\x05\x0a\x01", 3));
  const std::string good = files;  // the bad file in the middle (appended piecewise: GCC 12's false -Wrestrict)
  files += ' ';
  files += td.file("broken.et");
  files += good;
  CliRun a = run_cli("chakra validate -j 1" + files, td), b = run_cli("chakra validate -j 3" + files, td);
  EXPECT_EQ(a.rc, 1);
  EXPECT_EQ(b.rc, 1);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.err, b.err);
  EXPECT_NE(a.out.find("DLRM_HybridParallel.npus4.passes2.0.et.gz: 64 nodes, 0 errors, 0 warnings"), std::string::npos)
      << a.out;
  EXPECT_NE(a.err.find("broken.et"), std::string::npos) << a.err;
  size_t lines = 0;
  for (char c : a.out) lines += c == '\n';
  EXPECT_EQ(lines, 16u);
}

TEST_F(ManyFiles, FromTextWritesEachWorkloadIntoTheDirectoryAndFailsPerWorkload) {
  TempDir td;
  const std::string d = std::string(OPF_TEXT_DATA) + "/";
  const std::string ws = d + "MLP_ModelParallel/MLP_ModelParallel.txt " + d +
                         "Transformer_HybridParallel/Transformer_HybridParallel.txt " + d +
                         "DLRM_HybridParallel/DLRM_HybridParallel.txt";
  CliRun r = run_cli("chakra from-text -j 2 --npus 4 --passes 2 --compat reference -o " + td.path() + " " + ws, td);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("Transformer_HybridParallel.txt:1: unsupported parallelism type"), std::string::npos) << r.err;
  EXPECT_FALSE(test::exists(td.file("Transformer_HybridParallel.0.et")));
  for (const char* w : {"MLP_ModelParallel", "DLRM_HybridParallel"})
    for (int k = 0; k < 4; ++k) {
      // the reference's bytes, as for one workload at a time (test_from_text_reference)
      const std::string want = read_all(d + w + "/" + w + ".npus4.passes2." + std::to_string(k) + ".et.gz");
      EXPECT_TRUE(test::read_file(td.file(std::string(w) + "." + std::to_string(k) + ".et")) == want) << w << " " << k;
    }
  CliRun dup =
      run_cli("chakra from-text --npus 1 -o " + td.path() + " " + d + "MLP_ModelParallel/MLP_ModelParallel.txt " + d +
                  "MLP_ModelParallel/../MLP_ModelParallel/MLP_ModelParallel.txt",
              td);
  EXPECT_EQ(dup.rc, 2);
  EXPECT_NE(dup.err.find("same output name as"), std::string::npos) << dup.err;
}

}  // namespace
}  // namespace opf::chakra
