// The Python text semantics compat mode relies on; expected values are what CPython 3.11 does
// (int(), str.split(), text-mode read(), the strict UTF-8 codec).
#include <gtest/gtest.h>

#include "py_text.h"

namespace opf::chakra {
namespace {

std::string int_of(const std::string& t) {
  PyInt v;
  if (!py::parse_int(t, v)) return "ValueError";
  if (v.huge) return std::string(v.negative ? "-" : "") + "huge";
  return std::to_string(v.fits_i64() ? v.as_i64() : 0) + (v.fits_i64() ? "" : "?");
}

TEST(PyInt, AcceptsWhatIntAccepts) {
  EXPECT_EQ(int_of("42"), "42");
  EXPECT_EQ(int_of("+5"), "5");
  EXPECT_EQ(int_of("-7"), "-7");
  EXPECT_EQ(int_of("-0"), "0");
  EXPECT_EQ(int_of("007"), "7");
  EXPECT_EQ(int_of("1_000"), "1000");
  EXPECT_EQ(int_of("0_0"), "0");
  EXPECT_EQ(int_of("9223372036854775807"), "9223372036854775807");
  EXPECT_EQ(int_of("-9223372036854775808"), "-9223372036854775808");
  EXPECT_EQ(int_of("123456789012345678901234567890"), "huge");
}

TEST(PyInt, RefusesWhatIntRefuses) {
  for (const char* t : {"", "+", "-", "_1", "1_", "1__0", "1.0", "0x10", "1e3", "five", "--1", "+-1", "1 2"})
    EXPECT_EQ(int_of(t), "ValueError") << "'" << t << "'";
}

TEST(PyInt, RangesOfTheProtobufFields) {
  PyInt v;
  ASSERT_TRUE(py::parse_int("18446744073709551615", v));
  EXPECT_TRUE(v.fits_u64());
  EXPECT_FALSE(v.fits_i64());
  ASSERT_TRUE(py::parse_int("18446744073709551616", v));
  EXPECT_FALSE(v.fits_u64());
  ASSERT_TRUE(py::parse_int("-1", v));
  EXPECT_FALSE(v.fits_u64());
  EXPECT_TRUE(v.fits_i64());
}

TEST(PySplit, SplitsOnRunsOfAsciiAndUnicodeWhitespace) {
  using V = std::vector<std::string_view>;
  EXPECT_EQ(py::split("  a\tb  c \r"), (V{"a", "b", "c"}));
  EXPECT_EQ(py::split("a\x1c"
                      "b\x1f"
                      "c\x0b"
                      "d\x0c"
                      "e"),
            (V{"a", "b", "c", "d", "e"}));
  EXPECT_EQ(py::split("a\xc2\xa0"
                      "b\xe3\x80\x80"
                      "c\xe2\x80\x89"
                      "d\xc2\x85"
                      "e"),
            (V{"a", "b", "c", "d", "e"}));
  // U+00A9 and U+2010 are not whitespace
  EXPECT_EQ(py::split("a\xc2\xa9"
                      "b\xe2\x80\x90"
                      "c"),
            (V{"a\xc2\xa9"
               "b\xe2\x80\x90"
               "c"}));
  EXPECT_TRUE(py::split(" \t ").empty());
}

TEST(PyText, UniversalNewlinesAndLines) {
  EXPECT_EQ(py::universal_newlines("a\r\nb\rc\n\r\n"), "a\nb\nc\n\n");
  using V = std::vector<std::string_view>;
  EXPECT_EQ(py::lines("a\nb\n"), (V{"a", "b"}));
  EXPECT_EQ(py::lines("a\n\nb"), (V{"a", "", "b"}));
  EXPECT_TRUE(py::lines("").empty());
}

TEST(PyText, StrictUtf8LikeCPython) {
  const size_t ok = std::string_view::npos;
  EXPECT_EQ(py::invalid_utf8_at("plain \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), ok);
  EXPECT_EQ(py::invalid_utf8_at("ab\xc0\x80"), 2u);        // overlong NUL
  EXPECT_EQ(py::invalid_utf8_at("\xe0\x80\xaf"), 0u);      // overlong
  EXPECT_EQ(py::invalid_utf8_at("x\xed\xa0\x80"), 1u);     // surrogate U+D800
  EXPECT_EQ(py::invalid_utf8_at("\xf4\x90\x80\x80"), 0u);  // beyond U+10FFFF
  EXPECT_EQ(py::invalid_utf8_at("abc\xe2\x82"), 3u);       // cut short
  EXPECT_EQ(py::invalid_utf8_at("\xff"), 0u);
}

}  // namespace
}  // namespace opf::chakra
