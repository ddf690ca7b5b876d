// Writes JSON text byte-identical to Python's json.dump(obj, f, indent=4) with its defaults
// (ensure_ascii=True, allow_nan=True, separators "," + newline and ": "), which is how the
// reference linker writes its output. Values come from simdjson DOM elements, so every number
// keeps the kind Python's parser would have given it (int vs float).
#pragma once

#include <simdjson.h>

#include <string>
#include <string_view>

namespace opf::chakra {

void py_json_double(double d, std::string& out);   // float repr; NaN / Infinity / -Infinity
void py_json_indent(int level, std::string& out);  // newline + 4*level spaces
// Appends `v` formatted as json.dump(indent=4) would at nesting depth `level`.
void py_json_element(simdjson::dom::element v, int level, std::string& out);
// Appends `v` as json.dumps(v) writes it without indent (separators ", " and ": ").
void py_json_element_compact(simdjson::dom::element v, std::string& out);

}  // namespace opf::chakra
