#include "common/sha256.h"

#include <gtest/gtest.h>

#include "common/files.h"
#include "common/temp_dir.h"
#include "opforge/error.h"

// FIPS 180-2 test vectors
TEST(Sha256, KnownVectors) {
  EXPECT_EQ(opf::hash::sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(opf::hash::sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256, FileMatchesBytesAndMissingFileNamesThePath) {
  opf::files::TempDir d("opf-common-sha-");
  std::string big(200000, 'x');  // more than one read() buffer
  opf::files::write_atomic(d.file("f"), big);
  EXPECT_EQ(opf::hash::sha256_file(d.file("f")), opf::hash::sha256_hex(big));
  try {
    opf::hash::sha256_file(d.file("missing"));
    FAIL() << "no error";
  } catch (const opf::Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot read " + d.file("missing") + ": No such file or directory");
  }
}
