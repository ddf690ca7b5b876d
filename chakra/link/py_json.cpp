#include "py_json.h"

#include <cmath>

#include "common/json_escape.h"
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
        opf::json::append_quoted(out, f.key, opf::json::Escape::python_ascii);
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
    case element_type::STRING:
      opf::json::append_quoted(out, std::string_view(v), opf::json::Escape::python_ascii);
      return;
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
        opf::json::append_quoted(out, f.key, opf::json::Escape::python_ascii);
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
