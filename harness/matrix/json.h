// A small JSON value for the harness's own records (run manifest, cell records, gate inputs).
// Parsing goes through simdjson; writing is done here because no JSON writer is installed
// (simdjson 3.0.1 only serialises what it parsed). Objects keep insertion order so records diff well.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace opf::json {

class Value;
using Array = std::vector<Value>;
using Object = std::vector<std::pair<std::string, Value>>;

class Value {
 public:
  Value() = default;
  Value(std::nullptr_t) {}
  Value(bool b) : v_(b) {}
  Value(int i) : v_(int64_t(i)) {}
  Value(int64_t i) : v_(i) {}
  Value(uint64_t i) : v_(int64_t(i)) {}
  Value(double d) : v_(d) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(std::string_view s) : v_(std::string(s)) {}
  Value(Array a) : v_(std::move(a)) {}
  Value(Object o) : v_(std::move(o)) {}

  bool is_null() const { return std::holds_alternative<std::nullptr_t>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_number() const { return std::holds_alternative<int64_t>(v_) || std::holds_alternative<double>(v_); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_array() const { return std::holds_alternative<Array>(v_); }
  bool is_object() const { return std::holds_alternative<Object>(v_); }

  bool as_bool(bool fallback = false) const { return is_bool() ? std::get<bool>(v_) : fallback; }
  double as_double(double fallback = 0) const;
  int64_t as_int(int64_t fallback = 0) const;
  const std::string& as_string() const;  // "" when not a string
  const Array& as_array() const;         // empty when not an array
  const Object& as_object() const;       // empty when not an object
  Array& array();                        // converts null to an empty array
  Object& object();                      // converts null to an empty object

  // Object access: get() returns a null value when absent; set() replaces or appends.
  const Value& get(std::string_view key) const;
  bool has(std::string_view key) const;
  Value& set(std::string_view key, Value v);
  Value& push(Value v);  // array append
  std::string str(std::string_view key, std::string_view fallback = "") const;
  double num(std::string_view key, double fallback = 0) const;

 private:
  std::variant<std::nullptr_t, bool, int64_t, double, std::string, Array, Object> v_;
};

// indent < 0: one line.
std::string dump(const Value& v, int indent = 2);

// Throws opf::Error "<origin>: invalid JSON (<why>)".
Value parse(std::string_view text, const std::string& origin);
Value parse_file(const std::string& path);
// JSON Lines (one value per line, e.g. Meson's testlog.json); errors name the line.
std::vector<Value> parse_lines_file(const std::string& path);

}  // namespace opf::json
