#include "py_json.h"

#include <cmath>

#include "py_repr.h"

namespace opf::chakra {

void py_json_double(double d, std::string& out) {
  if (std::isnan(d)) {
    out += "NaN";
  } else if (std::isinf(d)) {
    out += d < 0 ? "-Infinity" : "Infinity";
  } else {
    py_repr_double(d, out);
  }
}

namespace {
const char kHex[] = "0123456789abcdef";
void u_escape(uint32_t u, std::string& out) {
  out += "\\u";
  for (int s = 12; s >= 0; s -= 4) out.push_back(kHex[(u >> s) & 0xf]);
}
}  // namespace

void py_json_string(std::string_view s, std::string& out) {
  out.push_back('"');
  size_t i = 0, n = s.size();
  while (i < n) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      // copy the run of plain ASCII at once
      size_t j = i + 1;
      while (j < n) {
        unsigned char d = static_cast<unsigned char>(s[j]);
        if (d < 0x20 || d >= 0x7f || d == '"' || d == '\\') break;
        ++j;
      }
      out.append(s.data() + i, j - i);
      i = j;
      continue;
    }
    if (c < 0x80) {
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
      ++i;
      continue;
    }
    // UTF-8 sequence (simdjson has validated it) -> code point -> \uXXXX (surrogate pair above BMP)
    uint32_t cp;
    int len;
    if (c < 0xe0) {
      cp = c & 0x1f;
      len = 2;
    } else if (c < 0xf0) {
      cp = c & 0x0f;
      len = 3;
    } else {
      cp = c & 0x07;
      len = 4;
    }
    for (int k = 1; k < len && i + k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
    i += len;
    if (cp >= 0x10000) {
      cp -= 0x10000;
      u_escape(0xd800 + (cp >> 10), out);
      u_escape(0xdc00 + (cp & 0x3ff), out);
    } else {
      u_escape(cp, out);
    }
  }
  out.push_back('"');
}

void py_json_indent(int level, std::string& out) {
  out.push_back('\n');
  out.append(size_t(level) * 4, ' ');
}

void py_json_element(simdjson::dom::element v, int level, std::string& out) {
  using simdjson::dom::element_type;
  switch (v.type()) {
    case element_type::ARRAY: {
      auto arr = simdjson::dom::array(v);
      if (arr.begin() == arr.end()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      bool first = true;
      for (auto x : arr) {
        if (!first) out.push_back(',');
        first = false;
        py_json_indent(level + 1, out);
        py_json_element(x, level + 1, out);
      }
      py_json_indent(level, out);
      out.push_back(']');
      return;
    }
    case element_type::OBJECT: {
      auto obj = simdjson::dom::object(v);
      if (obj.begin() == obj.end()) {
        out += "{}";
        return;
      }
      out.push_back('{');
      bool first = true;
      for (auto f : obj) {
        if (!first) out.push_back(',');
        first = false;
        py_json_indent(level + 1, out);
        py_json_string(f.key, out);
        out += ": ";
        py_json_element(f.value, level + 1, out);
      }
      py_json_indent(level, out);
      out.push_back('}');
      return;
    }
    case element_type::INT64: out += std::to_string(int64_t(v)); return;
    case element_type::UINT64: out += std::to_string(uint64_t(v)); return;
    case element_type::DOUBLE: py_json_double(double(v), out); return;
    case element_type::STRING: py_json_string(std::string_view(v), out); return;
    case element_type::BOOL: out += bool(v) ? "true" : "false"; return;
    case element_type::NULL_VALUE: out += "null"; return;
  }
}

void py_json_element_compact(simdjson::dom::element v, std::string& out) {
  using simdjson::dom::element_type;
  switch (v.type()) {
    case element_type::ARRAY: {
      out.push_back('[');
      bool first = true;
      for (auto x : simdjson::dom::array(v)) {
        if (!first) out += ", ";
        first = false;
        py_json_element_compact(x, out);
      }
      out.push_back(']');
      return;
    }
    case element_type::OBJECT: {
      out.push_back('{');
      bool first = true;
      for (auto f : simdjson::dom::object(v)) {
        if (!first) out += ", ";
        first = false;
        py_json_string(f.key, out);
        out += ": ";
        py_json_element_compact(f.value, out);
      }
      out.push_back('}');
      return;
    }
    default: py_json_element(v, 0, out);
  }
}

}  // namespace opf::chakra
