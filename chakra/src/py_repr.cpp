#include "py_repr.h"

#include <charconv>
#include <cmath>
#include <cstring>

namespace opf::chakra {

namespace {

const char kHex[] = "0123456789abcdef";

void hex_escape(char kind, uint32_t cp, int digits, std::string& out) {
  out.push_back('\\');
  out.push_back(kind);
  for (int i = digits - 1; i >= 0; --i) out.push_back(kHex[(cp >> (4 * i)) & 0xf]);
}

// Non-ASCII code points CPython's str.isprintable() rejects (Cc, Cf, Cs, Co, Zl, Zp, Zs
// except ' '), for the assigned ranges that occur in practice.
bool py_unprintable(uint32_t cp) {
  if (cp <= 0xa0) return cp >= 0x7f;
  if (cp == 0xad) return true;
  if (cp < 0x600) return false;
  if ((cp >= 0x600 && cp <= 0x605) || cp == 0x61c || cp == 0x6dd || cp == 0x70f || cp == 0x890 || cp == 0x891 ||
      cp == 0x8e2 || cp == 0x180e || cp == 0x1680)
    return true;
  if (cp >= 0x2000 && cp <= 0x200f) return true;
  if (cp >= 0x2028 && cp <= 0x202f) return true;
  if (cp >= 0x205f && cp <= 0x206f && cp != 0x2065) return true;
  if (cp == 0x3000 || cp == 0xfeff) return true;
  if (cp >= 0xd800 && cp <= 0xf8ff) return true;  // surrogates, private use
  if (cp >= 0xfff9 && cp <= 0xfffb) return true;
  if (cp == 0xfffe || cp == 0xffff) return true;
  if (cp == 0x110bd || cp == 0x110cd || (cp >= 0x13430 && cp <= 0x1343f) || (cp >= 0x1bca0 && cp <= 0x1bca3) ||
      (cp >= 0x1d173 && cp <= 0x1d17a) || cp == 0xe0001 || (cp >= 0xe0020 && cp <= 0xe007f))
    return true;
  if (cp >= 0xf0000) return true;  // planes 15-16: private use
  return (cp & 0xfffe) == 0xfffe;  // noncharacters
}

}  // namespace

void py_repr_double(double d, std::string& out) {
  if (std::isnan(d)) {
    out += "nan";
    return;
  }
  if (std::isinf(d)) {
    out += d < 0 ? "-inf" : "inf";
    return;
  }
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string_view s(buf, size_t(r.ptr - buf));
  if (s[0] == '-') {
    out.push_back('-');
    s.remove_prefix(1);
  }
  // s = "D[.DDD]e[+-]XX"
  size_t epos = s.find('e');
  std::string digits;
  digits.push_back(s[0]);
  if (epos > 1) digits.append(s.substr(2, epos - 2));
  int exp10 = 0;
  std::from_chars(s.data() + epos + (s[epos + 1] == '+' ? 2 : 1), s.data() + s.size(), exp10);
  int decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(size_t(-decpt), '0');
      out += digits;
    } else if (size_t(decpt) >= digits.size()) {
      out += digits;
      out.append(size_t(decpt) - digits.size(), '0');
      out += ".0";
    } else {
      out.append(digits, 0, size_t(decpt));
      out.push_back('.');
      out.append(digits, size_t(decpt), std::string::npos);
    }
  } else {
    out.push_back(digits[0]);
    if (digits.size() > 1) {
      out.push_back('.');
      out.append(digits, 1, std::string::npos);
    }
    int e = decpt - 1;
    out.push_back('e');
    out.push_back(e < 0 ? '-' : '+');
    if (e < 0) e = -e;
    if (e < 10) out.push_back('0');
    out += std::to_string(e);
  }
}

void py_repr_string(std::string_view s, std::string& out) {
  bool has_sq = s.find('\'') != std::string_view::npos;
  bool has_dq = s.find('"') != std::string_view::npos;
  char q = (has_sq && !has_dq) ? '"' : '\'';
  out.push_back(q);
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    unsigned char c = *p;
    if (c < 0x80) {
      if (c == static_cast<unsigned char>(q) || c == '\\') {
        out.push_back('\\');
        out.push_back(char(c));
      } else if (c == '\t') {
        out += "\\t";
      } else if (c == '\n') {
        out += "\\n";
      } else if (c == '\r') {
        out += "\\r";
      } else if (c < 0x20 || c == 0x7f) {
        hex_escape('x', c, 2, out);
      } else {
        out.push_back(char(c));
      }
      ++p;
      continue;
    }
    // decode one UTF-8 sequence (input is validated UTF-8)
    int len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
    if (end - p < len) len = int(end - p);
    uint32_t cp = len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
    for (int i = 1; i < len; ++i) cp = (cp << 6) | (p[i] & 0x3f);
    if (py_unprintable(cp)) {
      if (cp <= 0xff) hex_escape('x', cp, 2, out);
      else if (cp <= 0xffff) hex_escape('u', cp, 4, out);
      else hex_escape('U', cp, 8, out);
    } else {
      out.append(reinterpret_cast<const char*>(p), size_t(len));
    }
    p += len;
  }
  out.push_back(q);
}

simdjson::error_code py_repr_json(simdjson::ondemand::value v, std::string& out, bool top_level) {
  using namespace simdjson;
  ondemand::json_type t;
  if (auto e = v.type().get(t)) return e;
  switch (t) {
    case ondemand::json_type::array: {
      ondemand::array arr;
      if (auto e = v.get_array().get(arr)) return e;
      out.push_back('[');
      bool first = true;
      for (auto el : arr) {
        ondemand::value ev;
        if (auto e = el.get(ev)) return e;
        if (!first) out += ", ";
        first = false;
        if (auto e = py_repr_json(ev, out)) return e;
      }
      out.push_back(']');
      return SUCCESS;
    }
    case ondemand::json_type::object: {
      ondemand::object obj;
      if (auto e = v.get_object().get(obj)) return e;
      out.push_back('{');
      bool first = true;
      for (auto field : obj) {
        std::string_view key;
        if (auto e = field.unescaped_key().get(key)) return e;
        if (!first) out += ", ";
        first = false;
        py_repr_string(key, out);
        out += ": ";
        if (auto e = py_repr_json(field.value(), out)) return e;
      }
      out.push_back('}');
      return SUCCESS;
    }
    case ondemand::json_type::string: {
      std::string_view s;
      if (auto e = v.get_string().get(s)) return e;
      if (top_level) out += s;
      else py_repr_string(s, out);
      return SUCCESS;
    }
    case ondemand::json_type::boolean: {
      bool b;
      if (auto e = v.get_bool().get(b)) return e;
      out += b ? "True" : "False";
      return SUCCESS;
    }
    case ondemand::json_type::null:
      if (!v.is_null()) return INCORRECT_TYPE;
      out += "None";
      return SUCCESS;
    case ondemand::json_type::number: {
      std::string_view tok = v.raw_json_token();
      while (!tok.empty() && (tok.back() == ' ' || tok.back() == '\n' || tok.back() == '\r' || tok.back() == '\t'))
        tok.remove_suffix(1);
      bool is_float = tok.find_first_of(".eE") != std::string_view::npos;
      if (is_float) {
        double d;
        if (auto e = v.get_double().get(d)) return e;
        py_repr_double(d, out);
        return SUCCESS;
      }
      // JSON integer: Python's int repr is its decimal text (no leading zeros in valid JSON)
      std::string_view digits = tok;
      if (!digits.empty() && digits[0] == '-') digits.remove_prefix(1);
      if (digits.empty() || (digits.size() > 1 && digits[0] == '0')) return NUMBER_ERROR;
      for (char c : digits)
        if (c < '0' || c > '9') return NUMBER_ERROR;
      if (digits == "0") out.push_back('0');  // "-0" is int 0
      else out += tok;
      return SUCCESS;
    }
  }
  return INCORRECT_TYPE;
}

}  // namespace opf::chakra
