#include "common/json_escape.h"

#include <gtest/gtest.h>

#include <string>

using opf::json::Escape;

namespace {
std::string utf8(std::string_view s) { return opf::json::quoted(s); }
std::string py(std::string_view s) { return opf::json::quoted(s, Escape::python_ascii); }
}  // namespace

TEST(JsonEscape, QuotesAndBackslashes) {
  EXPECT_EQ(utf8(""), "\"\"");
  EXPECT_EQ(utf8("a\"b\\c/d"), "\"a\\\"b\\\\c/d\"");
  EXPECT_EQ(py("a\"b\\c/d"), "\"a\\\"b\\\\c/d\"");
}

TEST(JsonEscape, ControlCharactersBothModes) {
  const std::string in("\n\r\t\b\f\x01\x1f", 7);
  const std::string want = "\"\\n\\r\\t\\b\\f\\u0001\\u001f\"";
  EXPECT_EQ(utf8(in), want);
  EXPECT_EQ(py(in), want);
  EXPECT_EQ(utf8(std::string_view("a\0b", 3)), "\"a\\u0000b\"");
}

TEST(JsonEscape, DelIsEscapedInBothModes) {
  EXPECT_EQ(utf8("x\x7fy"), "\"x\\u007fy\"");
  EXPECT_EQ(py("x\x7fy"), "\"x\\u007fy\"");  // as Python's json.dumps does
  EXPECT_EQ(utf8("~ "), "\"~ \"");           // the printable edges stay as they are
}

TEST(JsonEscape, NonAsciiUtf8KeptOrEscaped) {
  EXPECT_EQ(utf8("caf\xc3\xa9 \xe2\x82\xac"), "\"caf\xc3\xa9 \xe2\x82\xac\"");
  EXPECT_EQ(py("caf\xc3\xa9 \xe2\x82\xac"), "\"caf\\u00e9 \\u20ac\"");
  EXPECT_EQ(py("\xf0\x9f\x98\x80"), "\"\\ud83d\\ude00\"");  // U+1F600: a surrogate pair
}

TEST(JsonEscape, InvalidUtf8) {
  // utf8 mode does not repair: the bytes pass through
  EXPECT_EQ(utf8("\xff\xfe"), "\"\xff\xfe\"");
  // python mode decodes from the lead byte and what follows, never past the end
  EXPECT_EQ(py("\xe2\x82"), "\"\\u0082\"");
  EXPECT_EQ(py("a\x80"), "\"a\\u0000\"");
}
