#include <dlfcn.h>
#include <stdlib.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "common/files.h"
#include "common/number_text.h"
#include "common/shared_library.h"
#include "common/temp_dir.h"
#include "common/utc_time.h"
#include "opforge/error.h"

namespace fs = std::filesystem;

TEST(TempDir, RemovedWithItsContentsUnlessReleased) {
  std::string kept;
  std::string gone;
  {
    opf::files::TempDir d("opf-common-td-");
    gone = d.path();
    opf::files::write_atomic(d.file("sub/f"), "x");
    EXPECT_TRUE(fs::is_directory(gone));
  }
  EXPECT_FALSE(fs::exists(gone));
  {
    opf::files::TempDir d("opf-common-td-");
    kept = d.path();
    d.release();
  }
  EXPECT_TRUE(fs::is_directory(kept));
  fs::remove_all(kept);
}

TEST(TempDir, UnderTmpdirOrGivenParent) {
  opf::files::TempDir parent("opf-common-td-");
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  ::setenv("TMPDIR", parent.path().c_str(), 1);
  {
    opf::files::TempDir d("x-");
    EXPECT_EQ(fs::path(d.path()).parent_path().string(), parent.path());
  }
  if (old) ::setenv("TMPDIR", saved.c_str(), 1);
  else ::unsetenv("TMPDIR");
  opf::files::TempDir in(".y-", parent.path());
  EXPECT_EQ(fs::path(in.path()).parent_path().string(), parent.path());
  opf::files::TempDir failed;
  EXPECT_FALSE(failed.create("z-", "/nonexistent/opf-common"));
  EXPECT_THROW(opf::files::TempDir("z-", "/nonexistent/opf-common"), opf::Error);
}

TEST(UtcTime, Formats) {
  EXPECT_TRUE(std::regex_match(opf::utc_timestamp(), std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")))
      << opf::utc_timestamp();
  EXPECT_TRUE(std::regex_match(opf::utc_compact_timestamp(), std::regex(R"(\d{8}T\d{6}Z)")))
      << opf::utc_compact_timestamp();
}

TEST(SharedLibrary, ErrorCarriesDlerrorText) {
  try {
    opf::SharedLibrary::open("/nonexistent/libopf_none.so", RTLD_NOW, "cannot load module X");
    FAIL() << "no error";
  } catch (const opf::Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("cannot load module X: /nonexistent/libopf_none.so: ", 0), 0u) << what;
    EXPECT_NE(what.find("No such file"), std::string::npos) << what;
  }
  std::string why;
  EXPECT_FALSE(opf::SharedLibrary::try_open("/nonexistent/libopf_none.so", RTLD_NOW, &why));
  EXPECT_NE(why.find("/nonexistent/libopf_none.so"), std::string::npos);
}

TEST(SharedLibrary, TypedSymbols) {
  auto m = opf::SharedLibrary::open("libm.so.6", RTLD_NOW | RTLD_LOCAL, "libm");
  auto cosine = m.symbol<double (*)(double)>("cos");
  ASSERT_NE(cosine, nullptr);
  EXPECT_EQ(cosine(0.0), 1.0);
  EXPECT_EQ(m.symbol<void (*)()>("opf_no_such_symbol"), nullptr);
}

TEST(NumberText, ShortestRoundTrip) {
  EXPECT_EQ(opf::shortest_double(0.1), "0.1");
  EXPECT_EQ(opf::shortest_double(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(opf::shortest_double(100000), "1e+05");
  EXPECT_EQ(opf::shortest_double(100000, 6), "100000");
  EXPECT_EQ(opf::shortest_double(2.5e-7, 6), "2.5e-07");
}
