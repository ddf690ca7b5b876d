// Shortest decimal text of a double that reads back as the same value (printf %g style).
#pragma once

#include <string>

namespace opf {

// Tries %.<p>g for p = min_digits..17 and returns the first that round-trips through strtod
// (%.17g always does). min_digits > 1 keeps %g from switching to exponent notation early
// (1e+05 vs 100000): each caller keeps the form its readers already see.
std::string shortest_double(double v, int min_digits = 1);

}  // namespace opf
