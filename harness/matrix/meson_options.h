// What a matrix may vary, read from the project itself: every Meson option
// (`meson introspect <srcdir>/meson.build --buildoptions`, no build dir needed) and the ops and
// their declared backends (kernels/manifest.toml). Nothing here lists ops or options by name.
#pragma once

#include <string>
#include <vector>

#include "matrix/json.h"

namespace opf::matrix {

struct MesonOption {
  std::string name;
  std::string type;                  // combo, boolean, array, string, integer (features are combos)
  std::string section;               // user (project option), core, base, compiler, ...
  std::vector<std::string> choices;  // combo/feature choices
  std::string default_literal;       // the default as a native-file literal
  bool project() const { return section == "user"; }
  bool feature() const;  // combo with exactly enabled/disabled/auto
};

struct OptionCatalog {
  std::vector<MesonOption> options;
  const MesonOption* find(const std::string& name) const;
  // `origin` names the source in errors.
  static OptionCatalog from_json(const json::Value& introspect, const std::string& origin);
  static OptionCatalog introspect(const std::string& source_dir);  // runs meson
};

struct OpEntry {
  std::string name;
  std::vector<std::string> backends;  // declared in the manifest
};

struct OpManifest {
  std::vector<OpEntry> ops;
  std::vector<std::string> backends() const;  // union of declared backends, first-seen order
  static OpManifest read(const std::string& manifest_path);
};

// Native-file literal for a JSON value from Meson ('x', true, 3, ['a', 'b']).
std::string literal_from_json(const json::Value& v);
// Value for display: literal without quotes.
std::string display_literal(const std::string& literal);

}  // namespace opf::matrix
