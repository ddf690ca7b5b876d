#include "py_text.h"

namespace opf::chakra::py {

namespace {

// Length of the whitespace code point starting at s[i] (str.isspace()), 0 if none. The text
// is valid UTF-8 by the time it is split.
size_t space_at(std::string_view s, size_t i) {
  auto b = [&](size_t k) { return i + k < s.size() ? uint8_t(s[i + k]) : 0; };
  uint8_t c = b(0);
  if ((c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20)) return 1;
  if (c == 0xc2 && (b(1) == 0x85 || b(1) == 0xa0)) return 2;  // U+0085, U+00A0
  if (c == 0xe1 && b(1) == 0x9a && b(2) == 0x80) return 3;    // U+1680
  if (c == 0xe2 && b(1) == 0x80 && (b(2) <= 0x8a || b(2) == 0xa8 || b(2) == 0xa9 || b(2) == 0xaf))
    return b(2) >= 0x80 ? 3 : 0;                            // U+2000..200A, 2028, 2029, 202F
  if (c == 0xe2 && b(1) == 0x81 && b(2) == 0x9f) return 3;  // U+205F
  if (c == 0xe3 && b(1) == 0x80 && b(2) == 0x80) return 3;  // U+3000
  return 0;
}

}  // namespace

std::string universal_newlines(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    char c = bytes[i];
    if (c == '\r') {
      out.push_back('\n');
      if (i + 1 < bytes.size() && bytes[i + 1] == '\n') ++i;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

size_t invalid_utf8_at(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    uint8_t c = uint8_t(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n;
    uint8_t lo = 0x80, hi = 0xbf;  // allowed range of the second byte
    if (c >= 0xc2 && c <= 0xdf) n = 2;
    else if (c == 0xe0) n = 3, lo = 0xa0;  // no overlongs
    else if (c == 0xed) n = 3, hi = 0x9f;  // no surrogates
    else if (c >= 0xe1 && c <= 0xef) n = 3;
    else if (c == 0xf0) n = 4, lo = 0x90;
    else if (c == 0xf4) n = 4, hi = 0x8f;  // nothing beyond U+10FFFF
    else if (c >= 0xf1 && c <= 0xf3) n = 4;
    else return i;
    if (i + n > s.size()) return i;
    uint8_t c1 = uint8_t(s[i + 1]);
    if (c1 < lo || c1 > hi) return i;
    for (size_t k = 2; k < n; ++k)
      if ((uint8_t(s[i + k]) & 0xc0) != 0x80) return i;
    i += n;
  }
  return std::string_view::npos;
}

std::vector<std::string_view> lines(std::string_view text) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) {
      out.push_back(text.substr(start));
      break;
    }
    out.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return out;
}

std::vector<std::string_view> split(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0, token = std::string_view::npos;
  while (i < line.size()) {
    size_t w = space_at(line, i);
    if (w) {
      if (token != std::string_view::npos) out.push_back(line.substr(token, i - token));
      token = std::string_view::npos;
      i += w;
    } else {
      if (token == std::string_view::npos) token = i;
      ++i;
    }
  }
  if (token != std::string_view::npos) out.push_back(line.substr(token));
  return out;
}

bool parse_int(std::string_view t, PyInt& out) {
  out = PyInt{};
  out.token = std::string(t);
  size_t i = 0;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) out.negative = t[i++] == '-';
  if (i == t.size()) return false;
  bool prev_digit = false;
  for (; i < t.size(); ++i) {
    char c = t[i];
    if (c == '_') {
      // one underscore, between digits
      if (!prev_digit || i + 1 == t.size()) return false;
      prev_digit = false;
      continue;
    }
    if (c < '0' || c > '9') return false;
    prev_digit = true;
    uint64_t d = uint64_t(c - '0');
    if (out.magnitude > (UINT64_MAX - d) / 10) out.huge = true;
    else out.magnitude = out.magnitude * 10 + d;
  }
  return true;
}

}  // namespace opf::chakra::py
