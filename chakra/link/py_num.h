// A JSON number the way Python's json module holds it: an int stays an int, anything with a
// fraction or exponent is a float. The reference linker does its timing arithmetic on these
// Python values, so the result type (int vs float) and every float rounding step must follow
// Python: int op int -> int, otherwise both operands become doubles.
#pragma once

#include <cstdint>
#include <string>

#include "py_json.h"

namespace opf::chakra {

struct PyNum {
  bool is_int = true;
  int64_t i = 0;
  double d = 0;

  static PyNum of_int(int64_t v) { return PyNum{true, v, 0}; }
  static PyNum of_double(double v) { return PyNum{false, 0, v}; }
  double as_double() const { return is_int ? static_cast<double>(i) : d; }
  bool negative() const { return is_int ? i < 0 : d < 0; }
};

// Exact comparison, as Python compares int with float (no rounding of the int).
inline int py_cmp(const PyNum& a, const PyNum& b) {
  if (a.is_int && b.is_int) return a.i < b.i ? -1 : (a.i > b.i ? 1 : 0);
  long double x = a.is_int ? static_cast<long double>(a.i) : a.d;
  long double y = b.is_int ? static_cast<long double>(b.i) : b.d;
  return x < y ? -1 : (x > y ? 1 : 0);
}
inline bool operator<(const PyNum& a, const PyNum& b) { return py_cmp(a, b) < 0; }
inline bool operator<=(const PyNum& a, const PyNum& b) { return py_cmp(a, b) <= 0; }
inline bool operator>(const PyNum& a, const PyNum& b) { return py_cmp(a, b) > 0; }
inline bool operator>=(const PyNum& a, const PyNum& b) { return py_cmp(a, b) >= 0; }

inline PyNum py_add(const PyNum& a, const PyNum& b) {
  if (a.is_int && b.is_int) {
    int64_t r;
    if (!__builtin_add_overflow(a.i, b.i, &r)) return PyNum::of_int(r);
  }
  return PyNum::of_double(a.as_double() + b.as_double());
}
inline PyNum py_sub(const PyNum& a, const PyNum& b) {
  if (a.is_int && b.is_int) {
    int64_t r;
    if (!__builtin_sub_overflow(a.i, b.i, &r)) return PyNum::of_int(r);
  }
  return PyNum::of_double(a.as_double() - b.as_double());
}

inline void py_json_num(const PyNum& n, std::string& out) {
  if (n.is_int) out += std::to_string(n.i);
  else py_json_double(n.d, out);
}

}  // namespace opf::chakra
