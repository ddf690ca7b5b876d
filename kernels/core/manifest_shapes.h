// The manifest's SHAPE strings ("[rows, cols]", "[cols]", "[b, 1, sq, sk]", "[N, 2H]") read as
// symbolic shapes: a call's actual dims bind the symbols, integer literals must match. The GPU
// launcher checks every call with it (one binding for all arguments: a kernel reads its tensors
// blindly); `opforge op` also evaluates the shapes of outputs nobody supplied (an output whose
// shape cannot be evaluated is given by the user instead: --in NAME=FILE).
//
// List arguments' shapes describe one element ("[n_i]") and differ between elements, so their
// symbols bind nothing: an element is checked for its rank and literal dims only.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "opforge/manifest.h"

namespace opf {

struct SymDim {
  enum Kind { literal, symbol, other } kind = other;
  int64_t value = 0;   // literal
  std::string text;    // as written
  std::string name;    // symbol: its name ("H" in "2H")
  int64_t factor = 1;  // symbol: the dim is factor * symbol ("2H": x [N, 2H] of a gated op)
};

// "[rows, cols]" -> {rows, cols}; "[N, 2H]" -> {N, 2 x H}; "[]" -> {}; nullopt when the text is
// not a bracketed list (no documented shape).
std::optional<std::vector<SymDim>> parse_shape(std::string_view text);

class ShapeBinder {
 public:
  // Checks `actual` (argument `arg`, list element `element` or -1) against arg's documented
  // shape and binds its symbols. Throws opf::Error naming the argument and the dim.
  void bind(const ArgInfo& arg, const Shape& actual, int element = -1);
  // arg's shape from the bindings; throws opf::Error naming the argument, the dim and why.
  Shape infer(const ArgInfo& arg) const;

 private:
  struct Binding {
    std::string symbol;
    int64_t value;
    std::string by;  // the argument that bound it
  };
  std::vector<Binding> bound_;
};

}  // namespace opf
