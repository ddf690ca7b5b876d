#include "common/files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "common/temp_dir.h"
#include "common/temp_file.h"
#include "opforge/error.h"

namespace fs = std::filesystem;
using opf::files::TempDir;

namespace {
std::vector<std::string> names(const std::string& dir) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(dir)) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}
}  // namespace

TEST(Files, WriteAtomicWritesReplacesAndLeavesNoTemp) {
  TempDir d("opf-common-files-");
  opf::files::write_atomic(d.file("sub/a.txt"), "one");
  opf::files::write_atomic(d.file("sub/a.txt"), "two");
  EXPECT_EQ(opf::files::read(d.file("sub/a.txt")), "two");
  EXPECT_EQ(names(d.file("sub")), std::vector<std::string>{"a.txt"});
}

TEST(Files, WriteAtomicExecutableMode) {
  TempDir d("opf-common-files-");
  opf::files::write_atomic(d.file("x.sh"), "#!/bin/sh\n", true);
  struct stat st {};
  ASSERT_EQ(::stat(d.file("x.sh").c_str(), &st), 0);
  EXPECT_TRUE(st.st_mode & S_IXUSR);
}

TEST(Files, FailedPublishKeepsTheOldAndLeavesNoTemp) {
  TempDir d("opf-common-files-");
  // the target is a non-empty directory: rename() fails after the temp file was written
  opf::files::write_atomic(d.file("t/keep"), "old");
  EXPECT_THROW(opf::files::write_atomic(d.file("t"), "new"), opf::Error);
  EXPECT_EQ(opf::files::read(d.file("t/keep")), "old");
  EXPECT_EQ(names(d.path()), std::vector<std::string>{"t"});
}

TEST(Files, UnwritableDirectoryKeepsTheOldFile) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into any directory";
  TempDir d("opf-common-files-");
  opf::files::write_atomic(d.file("ro/f"), "old");
  ::chmod(d.file("ro").c_str(), 0555);
  EXPECT_THROW(opf::files::write_atomic(d.file("ro/f"), "new"), opf::Error);
  ::chmod(d.file("ro").c_str(), 0755);
  EXPECT_EQ(opf::files::read(d.file("ro/f")), "old");
  EXPECT_EQ(names(d.file("ro")), std::vector<std::string>{"f"});
}

TEST(Files, UnpublishedTempFileIsRemoved) {
  TempDir d("opf-common-files-");
  {
    opf::files::TempFile t;
    ASSERT_TRUE(t.create(d.file("out"), 0644));
    ASSERT_TRUE(t.write_all("abc", 3));
    EXPECT_EQ(names(d.path()).size(), 1u);
  }
  EXPECT_TRUE(names(d.path()).empty());
}

TEST(Files, ReadErrorsNameThePath) {
  try {
    opf::files::read("/nonexistent/opf-common");
    FAIL() << "no error";
  } catch (const opf::Error& e) {
    EXPECT_EQ(std::string(e.what()), "/nonexistent/opf-common: cannot read file (No such file or directory)");
  }
  std::string out = "unchanged";
  EXPECT_FALSE(opf::files::read_if_exists("/nonexistent/opf-common", out));
  EXPECT_EQ(out, "unchanged");
  EXPECT_FALSE(opf::files::exists("/nonexistent/opf-common"));
}

TEST(Files, MakeDirsUnderAFileFails) {
  TempDir d("opf-common-files-");
  opf::files::write_atomic(d.file("f"), "");
  opf::files::make_dirs(d.file("a/b/c"));
  EXPECT_TRUE(fs::is_directory(d.file("a/b/c")));
  EXPECT_THROW(opf::files::make_dirs(d.file("f/x")), opf::Error);
}
