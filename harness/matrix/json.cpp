#include "matrix/json.h"

#include <simdjson.h>

#include <cmath>
#include <cstdio>
#include <cctype>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/json_escape.h"
#include "common/number_text.h"
#include "opforge/error.h"

namespace opf::json {
namespace {
const Value& null_value() {
  static const Value v;
  return v;
}

void write(std::string& out, const Value& v, int indent, int depth);

void newline(std::string& out, int indent, int depth) {
  if (indent < 0) return;
  out += '\n';
  out.append(size_t(indent) * size_t(depth), ' ');
}

void write(std::string& out, const Value& v, int indent, int depth) {
  if (v.is_null()) {
    out += "null";
  } else if (v.is_bool()) {
    out += v.as_bool() ? "true" : "false";
  } else if (v.is_string()) {
    append_quoted(out, v.as_string());
  } else if (v.is_number()) {
    double d = v.as_double();
    int64_t i = v.as_int();
    if (double(i) == d && std::fabs(d) < 9e15) {
      out += std::to_string(i);
    } else if (!std::isfinite(d)) {
      out += "null";  // JSON has no inf/nan
    } else {
      out += shortest_double(d, 6);  // %g: 6 digits before exponent notation, as before
    }
  } else if (v.is_array()) {
    const auto& a = v.as_array();
    if (a.empty()) {
      out += "[]";
      return;
    }
    // short scalar arrays on one line
    bool flat = a.size() <= 16;
    for (const auto& e : a) flat = flat && !e.is_array() && !e.is_object();
    out += '[';
    for (size_t k = 0; k < a.size(); ++k) {
      if (k) out += flat || indent < 0 ? ", " : ",";
      if (!flat) newline(out, indent, depth + 1);
      write(out, a[k], indent, depth + 1);
    }
    if (!flat) newline(out, indent, depth);
    out += ']';
  } else {
    const auto& o = v.as_object();
    if (o.empty()) {
      out += "{}";
      return;
    }
    out += '{';
    for (size_t k = 0; k < o.size(); ++k) {
      if (k) out += ',';
      newline(out, indent, depth + 1);
      append_quoted(out, o[k].first);
      out += indent < 0 ? ":" : ": ";
      write(out, o[k].second, indent, depth + 1);
    }
    newline(out, indent, depth);
    out += '}';
  }
}

Value convert(simdjson::dom::element e) {
  using T = simdjson::dom::element_type;
  switch (e.type()) {
    case T::ARRAY: {
      Array a;
      simdjson::dom::array arr;
      if (e.get_array().get(arr) == simdjson::SUCCESS)
        for (auto x : arr) a.push_back(convert(x));
      return Value(std::move(a));
    }
    case T::OBJECT: {
      Object o;
      simdjson::dom::object obj;
      if (e.get_object().get(obj) == simdjson::SUCCESS)
        for (auto f : obj) o.emplace_back(std::string(f.key), convert(f.value));
      return Value(std::move(o));
    }
    case T::INT64: return Value(int64_t(e.get_int64().value_unsafe()));
    case T::UINT64: return Value(double(e.get_uint64().value_unsafe()));
    case T::DOUBLE: return Value(double(e.get_double().value_unsafe()));
    case T::STRING: return Value(std::string(e.get_string().value_unsafe()));
    case T::BOOL: return Value(bool(e.get_bool().value_unsafe()));
    case T::NULL_VALUE: return Value();
  }
  return Value();
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot read file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

double Value::as_double(double fallback) const {
  if (auto p = std::get_if<int64_t>(&v_)) return double(*p);
  if (auto p = std::get_if<double>(&v_)) return *p;
  return fallback;
}
int64_t Value::as_int(int64_t fallback) const {
  if (auto p = std::get_if<int64_t>(&v_)) return *p;
  if (auto p = std::get_if<double>(&v_)) return int64_t(*p);
  return fallback;
}
const std::string& Value::as_string() const {
  static const std::string empty;
  auto p = std::get_if<std::string>(&v_);
  return p ? *p : empty;
}
const Array& Value::as_array() const {
  static const Array empty;
  auto p = std::get_if<Array>(&v_);
  return p ? *p : empty;
}
const Object& Value::as_object() const {
  static const Object empty;
  auto p = std::get_if<Object>(&v_);
  return p ? *p : empty;
}
Array& Value::array() {
  if (!is_array()) v_ = Array{};
  return std::get<Array>(v_);
}
Object& Value::object() {
  if (!is_object()) v_ = Object{};
  return std::get<Object>(v_);
}
const Value& Value::get(std::string_view key) const {
  for (const auto& [k, v] : as_object())
    if (k == key) return v;
  return null_value();
}
bool Value::has(std::string_view key) const {
  for (const auto& [k, v] : as_object())
    if (k == key) return true;
  return false;
}
Value& Value::set(std::string_view key, Value v) {
  auto& o = object();
  for (auto& [k, old] : o)
    if (k == key) return old = std::move(v);
  o.emplace_back(std::string(key), std::move(v));
  return o.back().second;
}
Value& Value::push(Value v) {
  auto& a = array();
  a.push_back(std::move(v));
  return a.back();
}
std::string Value::str(std::string_view key, std::string_view fallback) const {
  const auto& v = get(key);
  return v.is_string() ? v.as_string() : std::string(fallback);
}
double Value::num(std::string_view key, double fallback) const { return get(key).as_double(fallback); }

std::string dump(const Value& v, int indent) {
  std::string out;
  write(out, v, indent, 0);
  if (indent >= 0) out += '\n';
  return out;
}

namespace {
// Where a text stops being JSON, as "line L, column C" (1-based; columns count bytes). simdjson's
// DOM parser reports what went wrong but not where, and a user fixing a hand-edited baseline
// needs the place: this grammar walk runs only after simdjson has refused the text.
class ErrorLocator {
 public:
  explicit ErrorLocator(std::string_view t) : t_(t) {}
  std::string where() {
    // after a whole value the trailing bytes are the problem; with none, one of simdjson's limits
    // (number range, UTF-8) is, and the end of the text is the place named
    if (value()) ws();
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at_ && i < t_.size(); ++i) {
      if (t_[i] == '\n') ++line, col = 1;
      else ++col;
    }
    return "line " + std::to_string(line) + ", column " + std::to_string(col);
  }

 private:
  void ws() {
    while (at_ < t_.size() && (t_[at_] == ' ' || t_[at_] == '\n' || t_[at_] == '\r' || t_[at_] == '\t')) ++at_;
  }
  bool eat(char c) {
    ws();
    if (at_ < t_.size() && t_[at_] == c) return ++at_, true;
    return false;
  }
  bool word(std::string_view w) {
    if (t_.substr(at_, w.size()) != w) return false;
    at_ += w.size();
    return true;
  }
  bool string() {
    if (!eat('"')) return false;
    while (at_ < t_.size()) {
      unsigned char c = t_[at_];
      if (c == '"') return ++at_, true;
      if (c < 0x20) return false;
      at_ += c == '\\' ? 2 : 1;
    }
    return false;
  }
  bool number() {
    size_t start = at_;
    if (at_ < t_.size() && t_[at_] == '-') ++at_;
    while (at_ < t_.size() && (std::isdigit((unsigned char)t_[at_]) || std::strchr(".eE+-", t_[at_]))) ++at_;
    return at_ > start;
  }
  bool value() {
    if (++depth_ > 1024) return false;
    ws();
    if (at_ >= t_.size()) return false;
    char c = t_[at_];
    bool ok;
    if (c == '{') ok = members();
    else if (c == '[') ok = elements();
    else if (c == '"') ok = string();
    else if (c == 't') ok = word("true");
    else if (c == 'f') ok = word("false");
    else if (c == 'n') ok = word("null");
    else ok = number();
    --depth_;
    return ok;
  }
  bool members() {
    ++at_;
    if (eat('}')) return true;
    do {
      if (!string() || !eat(':') || !value()) return false;
    } while (eat(','));
    return eat('}');
  }
  bool elements() {
    ++at_;
    if (eat(']')) return true;
    do {
      if (!value()) return false;
    } while (eat(','));
    return eat(']');
  }
  std::string_view t_;
  size_t at_ = 0;
  int depth_ = 0;
};
}  // namespace

Value parse(std::string_view text, const std::string& origin) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(text);
  simdjson::dom::element doc;
  auto err = parser.parse(padded).get(doc);
  if (err)
    throw Error(origin + ": " + ErrorLocator(text).where() + ": invalid JSON (" + simdjson::error_message(err) + ")");
  return convert(doc);
}

Value parse_file(const std::string& path) { return parse(read_all(path), path); }

std::vector<Value> parse_lines_file(const std::string& path) {
  std::string text = read_all(path);
  std::vector<Value> out;
  size_t line = 0, pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    ++line;
    std::string_view l(text.data() + pos, end - pos);
    if (l.find_first_not_of(" \t\r") != std::string_view::npos)
      out.push_back(parse(l, path + ":" + std::to_string(line)));
    pos = end + 1;
  }
  return out;
}

}  // namespace opf::json
