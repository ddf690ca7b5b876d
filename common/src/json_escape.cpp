#include "common/json_escape.h"

#include <cstdint>

namespace opf::json {
namespace {

const char kHex[] = "0123456789abcdef";

void u_escape(uint32_t u, std::string& out) {
  out += "\\u";
  for (int s = 12; s >= 0; s -= 4) out.push_back(kHex[(u >> s) & 0xf]);
}

bool plain_ascii(unsigned char c) { return c >= 0x20 && c < 0x7f && c != '"' && c != '\\'; }

void escape_ascii(unsigned char c, std::string& out) {
  switch (c) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    case '\r': out += "\\r"; break;
    case '\t': out += "\\t"; break;
    case '\b': out += "\\b"; break;
    case '\f': out += "\\f"; break;
    default: u_escape(c, out);
  }
}

// Decodes the UTF-8 sequence at s[i] and appends it as \uXXXX; returns the bytes consumed.
size_t escape_utf8_sequence(std::string_view s, size_t i, std::string& out) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
  if (len > s.size() - i) len = s.size() - i;
  uint32_t cp = c >= 0xf0 ? (c & 0x07) : c >= 0xe0 ? (c & 0x0f) : (c & 0x1f);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
  if (cp >= 0x10000) {
    cp -= 0x10000;
    u_escape(0xd800 + (cp >> 10), out);
    u_escape(0xdc00 + (cp & 0x3ff), out);
  } else {
    u_escape(cp, out);
  }
  return len;
}

}  // namespace

void append_quoted(std::string& out, std::string_view s, Escape mode) {
  out.push_back('"');
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (plain_ascii(c) || (c >= 0x80 && mode == Escape::utf8)) {
      // copy the run of bytes that need no escape at once (the writers' hot path)
      size_t j = i + 1;
      while (j < s.size()) {
        const unsigned char d = static_cast<unsigned char>(s[j]);
        if (!plain_ascii(d) && !(d >= 0x80 && mode == Escape::utf8)) break;
        ++j;
      }
      out.append(s.data() + i, j - i);
      i = j;
    } else if (c < 0x80) {
      escape_ascii(c, out);
      ++i;
    } else {
      i += escape_utf8_sequence(s, i, out);
    }
  }
  out.push_back('"');
}

std::string quoted(std::string_view s, Escape mode) {
  std::string out;
  out.reserve(s.size() + 2);
  append_quoted(out, s, mode);
  return out;
}

}  // namespace opf::json
