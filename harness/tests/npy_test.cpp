// The .npy reader/writer (harness/npy.h): round trips of every supported dtype, the header layout
// NumPy expects, versions 2.0/3.0, and malformed files, each refused with one line naming the
// file and the byte offset.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "npy.h"
#include "opforge/error.h"

namespace opf::npy {
namespace {
namespace fs = std::filesystem;

struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/opf-npy-test-XXXXXX";
    path = mkdtemp(t);
  }
  ~TempDir() { fs::remove_all(path); }
};

Array filled(DType d, bool boolean, std::vector<int64_t> shape, unsigned seed) {
  Array a;
  a.dtype = d;
  a.boolean = boolean;
  a.shape = std::move(shape);
  a.data.resize(size_t(a.numel()) * dtype_size(d));
  std::mt19937 rng(seed);
  for (auto& b : a.data) b = std::byte(rng() & 0xff);
  if (boolean)
    for (auto& b : a.data) b = std::byte(uint8_t(b) & 1);
  return a;
}

// A .npy file from its parts: header dict text (padded as NumPy does unless raw), data bytes.
std::string make(const std::string& dict, const std::string& data, int major = 1, bool pad = true) {
  std::string h = dict;
  const size_t prefix = major == 1 ? 10 : 12;
  if (pad) {
    while ((prefix + h.size() + 1) % 64) h += ' ';
    h += '\n';
  }
  std::string out = "\x93NUMPY";
  out += char(major);
  out += char(0);
  for (size_t k = 0; k < prefix - 8; ++k) out += char((h.size() >> (8 * k)) & 0xff);
  return out + h + data;
}

const std::string kDict34 = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }";

// The error parse() gives for bytes, checked to be one line naming the file.
std::string error_of(const std::string& bytes) {
  try {
    parse(bytes, "bad.npy");
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_EQ(m.rfind("bad.npy: byte ", 0), 0u) << m;
    return m;
  }
  ADD_FAILURE() << "parsed without an error";
  return "";
}

void expect_error(const std::string& bytes, const std::string& part) {
  const std::string m = error_of(bytes);
  EXPECT_NE(m.find(part), std::string::npos) << "error: " << m << "\nwanted: " << part;
}

TEST(Npy, RoundTripEveryDtype) {
  TempDir t;
  const struct {
    DType d;
    bool boolean;
    const char* descr;
  } kinds[] = {{DType::f32, false, "<f4"}, {DType::f64, false, "<f8"}, {DType::f16, false, "<f2"},
               {DType::i64, false, "<i8"}, {DType::i32, false, "<i4"}, {DType::u8, false, "|u1"},
               {DType::u8, true, "|b1"}};
  const std::vector<std::vector<int64_t>> shapes = {{3, 4}, {7}, {}, {0, 5}, {2, 1, 3, 1, 2, 2}};
  unsigned seed = 1;
  for (const auto& k : kinds)
    for (const auto& shape : shapes) {
      const Array a = filled(k.d, k.boolean, shape, seed++);
      EXPECT_EQ(descr(a), k.descr);
      const std::string path = t.path + "/a.npy";
      write(path, a);
      const Array b = read(path);
      EXPECT_EQ(b.dtype, a.dtype);
      EXPECT_EQ(b.boolean, a.boolean);
      EXPECT_EQ(b.shape, a.shape);
      EXPECT_EQ(b.data, a.data) << k.descr;
    }
  // the temp files are gone: only a.npy is left
  EXPECT_EQ(std::distance(fs::directory_iterator(t.path), fs::directory_iterator()), 1);
}

TEST(Npy, ScalarHasOneElement) {
  const Array a = parse(make("{'descr': '<f8', 'fortran_order': False, 'shape': (), }", std::string(8, '\0')), "s.npy");
  EXPECT_TRUE(a.shape.empty());
  EXPECT_EQ(a.numel(), 1);
  EXPECT_EQ(a.data.size(), 8u);
}

TEST(Npy, HeaderIsNumpysV1PaddedTo64) {
  Array a;
  a.dtype = DType::f32;
  a.shape = {3, 4};
  a.data.resize(48);
  const std::string s = serialize(a);
  ASSERT_GE(s.size(), 10u);
  EXPECT_EQ(s.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t hlen = uint8_t(s[8]) | size_t(uint8_t(s[9])) << 8;
  EXPECT_EQ((10 + hlen) % 64, 0u);
  EXPECT_EQ(hlen, 118u);  // what numpy.save writes for this array
  const std::string header = s.substr(10, hlen);
  EXPECT_EQ(header.substr(0, kDict34.size()), kDict34);
  EXPECT_EQ(header.back(), '\n');
  EXPECT_EQ(header.find_first_not_of(' ', kDict34.size()), hlen - 1);
  EXPECT_EQ(s.size(), 10 + hlen + 48);
  a.shape = {5};
  a.data.resize(20);
  EXPECT_NE(serialize(a).find("'shape': (5,), }"), std::string::npos);  // a 1-tuple keeps its comma
}

TEST(Npy, ReadsVersions2And3) {
  for (int major : {2, 3}) {
    const Array a = parse(make(kDict34, std::string(48, '\x01'), major), "v.npy");
    EXPECT_EQ(a.shape, (std::vector<int64_t>{3, 4}));
    EXPECT_EQ(a.data.size(), 48u);
  }
  // double quotes, no trailing comma, no padding: still the dict NumPy's literal_eval accepts
  const Array b = parse(
      make("{\"shape\": (2,), \"descr\": \"<i4\", \"fortran_order\": False}", std::string(8, '\0'), 1, false), "q.npy");
  EXPECT_EQ(b.dtype, DType::i32);
}

TEST(Npy, WritesVersion2WhenTheHeaderOutgrowsV1) {
  Array a;
  a.dtype = DType::u8;
  a.shape.assign(25000, 0);  // "0, " x 25000: a header over 65535 bytes, no data
  const std::string s = serialize(a);
  EXPECT_EQ(s[6], 2);
  const size_t hlen = uint8_t(s[8]) | size_t(uint8_t(s[9])) << 8 | size_t(uint8_t(s[10])) << 16;
  EXPECT_EQ((12 + hlen) % 64, 0u);
  EXPECT_EQ(parse(s, "big.npy").shape.size(), 25000u);
}

TEST(Npy, Malformed) {
  const std::string d48(48, '\0');
  // bad magic
  expect_error("\x93NUMPZ" + make(kDict34, d48).substr(6), "byte 5: bad magic");
  expect_error("PK\x03\x04", "byte 0: bad magic");
  // truncated inside the magic, the version, the header length field
  expect_error("\x93NUM", "byte 4: file ends inside the magic");
  expect_error(std::string("\x93NUMPY\x01", 7), "byte 7: file ends inside the format version");
  expect_error(std::string("\x93NUMPY\x01\x00\x76", 9), "byte 9: file ends inside the header length");
  // unsupported version
  expect_error(make(kDict34, d48, 4), "byte 6: unsupported format version 4.0");
  // header length past the end of the file
  const std::string ok = make(kDict34, d48);
  expect_error(ok.substr(0, 100), "byte 8: header length 118 runs past the end of the file (100 bytes)");
  // data too short / too long (the data starts at byte 128)
  expect_error(ok.substr(0, ok.size() - 1), "byte 128: data is 47 bytes, but shape (3, 4) of <f4 needs 48");
  expect_error(ok + "x", "byte 128: data is 49 bytes");
  // fortran order, big-endian, unknown and structured descr
  expect_error(make("{'descr': '<f4', 'fortran_order': True, 'shape': (3, 4), }", d48),
               "byte 44: field 'fortran_order' is True");
  expect_error(make("{'descr': '>f4', 'fortran_order': False, 'shape': (3, 4), }", d48),
               "byte 20: field 'descr' '>f4' is big-endian");
  expect_error(make("{'descr': '<c8', 'fortran_order': False, 'shape': (3, 4), }", d48), "'<c8' is not supported");
  expect_error(make("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }", ""),
               "byte 20: field 'descr'");
  // shapes: negative, too many digits, a product that overflows, an int that is not a tuple
  expect_error(make("{'descr': '<f4', 'fortran_order': False, 'shape': (3, -4), }", d48),
               "byte 64: field 'shape': dim 1 is negative");
  expect_error(make("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", ""),
               "dim 0 does not fit in 64 bits");
  expect_error(make("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", ""),
               "byte 60: field 'shape' (4294967296, 4294967296) overflows 64 bits");
  expect_error(make("{'descr': '<f8', 'fortran_order': False, 'shape': (2305843009213693952,), }", ""),
               "needs more than 2^63 bytes");
  expect_error(make("{'descr': '<f4', 'fortran_order': False, 'shape': (3), }", ""), "is not a tuple: write (3,)");
  // missing, unknown and duplicate keys
  expect_error(make("{'descr': '<f4', 'fortran_order': False, }", ""), "header has no 'shape' key");
  expect_error(make("{'descr': '<f4', 'shape': (1,), }", ""), "header has no 'fortran_order' key");
  expect_error(make("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", ""), "unexpected key 'x'");
  expect_error(make("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", ""),
               "byte 27: duplicate key 'descr'");
  // malformed dict syntax
  expect_error(make("{'descr' '<f4', 'fortran_order': False, 'shape': (1,)}", ""),
               "byte 19: expected ':' after a header key");
  expect_error(make("{'descr': '<f4, 'fortran_order': False}", "", 1, false), "expected ',' or '}'");
  expect_error(make("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)", "", 1, false),
               "header ends inside the dict");
  expect_error(make("{'descr': '<f4', 'fortran_order': false, 'shape': (1,)}", ""), "must be True or False");
  expect_error(make("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x", ""),
               "unexpected text after the header dict");
  expect_error(make("'descr'", ""), "byte 10: expected '{' at the start of the header");
  // bool data other than 0/1
  expect_error(make("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", std::string("\x01\x00\x02", 3)),
               "byte 130: element 2 of a bool array is 2");
}

TEST(Npy, ReadErrorsNameTheFile) {
  TempDir t;
  try {
    read(t.path + "/missing.npy");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.npy: cannot open: No such file"), std::string::npos) << e.what();
  }
  try {
    read(t.path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
  std::ofstream(t.path + "/junk.npy") << "hello";
  try {
    read(t.path + "/junk.npy");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), t.path + "/junk.npy: byte 0: bad magic: not a .npy file (expected \\x93NUMPY)");
  }
}

}  // namespace
}  // namespace opf::npy
