#include "core/manifest_shapes.h"

#include <cctype>

#include "opforge/error.h"

namespace opf {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool is_symbol(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

bool is_literal(std::string_view s, int64_t& v) {
  if (s.empty() || s.size() > 18) return false;
  v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  return true;
}

std::string who(const ArgInfo& arg, int element) {
  return "argument '" + arg.name + "'" + (element >= 0 ? " element " + std::to_string(element) : "");
}

std::string dim_label(size_t d, const SymDim& s) {
  return "dim " + std::to_string(d) + (s.kind == SymDim::literal ? "" : " (" + s.text + ")");
}

// "[B, T, U, H] | [rows, H]": an argument with alternative layouts (e.g. a packed variant chosen
// by a param). Each alternative is one shape; a text without '|' is its own single alternative.
std::vector<std::string_view> alternatives(std::string_view text) {
  std::vector<std::string_view> out;
  for (size_t bar; (bar = text.find('|')) != std::string_view::npos; text.remove_prefix(bar + 1))
    out.push_back(text.substr(0, bar));
  out.push_back(text);
  return out;
}

// The first alternative of `text` with `rank` dims (rank < 0: the first that parses); nullopt when
// none parses (undocumented), the first parsed one when none has that rank (the caller reports it).
std::optional<std::vector<SymDim>> pick_shape(std::string_view text, int64_t rank) {
  std::optional<std::vector<SymDim>> first;
  for (std::string_view alt : alternatives(text)) {
    auto doc = parse_shape(alt);
    if (!doc) continue;
    if (rank < 0 || int64_t(doc->size()) == rank) return doc;
    if (!first) first = std::move(doc);
  }
  return first;
}

}  // namespace

std::optional<std::vector<SymDim>> parse_shape(std::string_view text) {
  text = trim(text);
  if (text.size() < 2 || text.front() != '[' || text.back() != ']') return std::nullopt;
  std::string_view body = trim(text.substr(1, text.size() - 2));
  std::vector<SymDim> dims;
  if (body.empty()) return dims;
  while (true) {
    const size_t comma = body.find(',');
    SymDim d;
    d.text = std::string(trim(body.substr(0, comma)));
    if (is_literal(d.text, d.value)) {
      d.kind = SymDim::literal;
    } else {
      // an optional positive integer factor, then a symbol: "H", "2H"
      const size_t digits = d.text.find_first_not_of("0123456789");
      const std::string_view name = std::string_view(d.text).substr(digits == std::string::npos ? 0 : digits);
      int64_t factor = 1;
      if (is_symbol(name) && (digits == 0 || (is_literal(d.text.substr(0, digits), factor) && factor > 0))) {
        d.kind = SymDim::symbol;
        d.name = std::string(name);
        d.factor = factor;
      }
    }
    dims.push_back(d);
    if (comma == std::string_view::npos) break;
    body.remove_prefix(comma + 1);
  }
  return dims;
}

void ShapeBinder::bind(const ArgInfo& arg, const Shape& actual, int element) {
  const auto doc = pick_shape(arg.shape, int64_t(actual.size()));
  if (!doc) return;  // undocumented: nothing to check or bind
  if (doc->size() != actual.size())
    throw Error(who(arg, element) + " has " + std::to_string(actual.size()) + " dims; its manifest shape " + arg.shape +
                " has " + std::to_string(doc->size()));
  for (size_t d = 0; d < actual.size(); ++d) {
    const SymDim& s = (*doc)[d];
    if (s.kind == SymDim::literal && actual[d] != s.value)
      throw Error(who(arg, element) + " dim " + std::to_string(d) + " is " + std::to_string(actual[d]) +
                  "; its manifest shape " + arg.shape + " says " + s.text);
    if (s.kind != SymDim::symbol || arg.list) continue;
    if (actual[d] % s.factor != 0)
      throw Error(who(arg, element) + " " + dim_label(d, s) + " is " + std::to_string(actual[d]) +
                  ", not a multiple of " + std::to_string(s.factor));
    bool found = false;
    for (const Binding& b : bound_)
      if (b.symbol == s.name) {
        found = true;
        if (b.value * s.factor != actual[d])
          throw Error(who(arg, element) + " " + dim_label(d, s) + " is " + std::to_string(actual[d]) +
                      ", but argument '" + b.by + "' gave " + s.name + " = " + std::to_string(b.value));
      }
    if (!found) bound_.push_back({s.name, actual[d] / s.factor, arg.name});
  }
}

Shape ShapeBinder::infer(const ArgInfo& arg) const {
  const std::string give = "; give its shape with --in " + arg.name + "=FILE";
  if (arg.list)
    throw Error("argument '" + arg.name + "' is a list output: give its elements with --in " + arg.name + "=FILE");
  const auto doc = pick_shape(arg.shape, -1);  // the first alternative: other layouts need --in
  if (!doc) throw Error("argument '" + arg.name + "' has no manifest shape to infer" + give);
  Shape out;
  for (size_t d = 0; d < doc->size(); ++d) {
    const SymDim& s = (*doc)[d];
    if (s.kind == SymDim::literal) {
      out.push_back(s.value);
      continue;
    }
    if (s.kind == SymDim::other)
      throw Error("argument '" + arg.name + "' " + dim_label(d, s) + " is not a symbol or a number" + give);
    const Binding* hit = nullptr;
    for (const Binding& b : bound_)
      if (b.symbol == s.name) hit = &b;
    if (!hit) throw Error("argument '" + arg.name + "' " + dim_label(d, s) + " is not given by any input" + give);
    out.push_back(hit->value * s.factor);
  }
  return out;
}

}  // namespace opf
