// The per-cell artefact inventory, checked exactly (what counting .so files only guessed at):
//  - which op x backend pairs this build enables follows from its options, the manifest's
//    declared backends and the backends configure resolved (build_config.h OPF_HAVE_*);
//  - `opforge ops --json` of the cell lists exactly those;
//  - prebuilt/both: each has its module target (meson introspect --targets) and file;
//    jit: none has a module target or file, and after the tests each has a JIT cache entry
//    (<cache>/<op>/<backend>/<key>/, the key this build computes);
//  - the cell's `opforge matrix probe` loads every one (cold and warm);
//  - disabled ops have no target, no file, no listing.
// A backend that cannot run here (no device) makes its checks "owed", never passed.
#pragma once

#include <string>
#include <vector>

#include "matrix/json.h"
#include "matrix/meson_options.h"

namespace opf::matrix {

struct InventoryCheck {
  std::string what;  // expected-ops, listing, module, no-module, jit-cache, load, disabled
  std::string op, backend;
  std::string status;  // pass, fail, owed
  std::string detail;
};

struct Inventory {
  std::vector<InventoryCheck> checks;
  json::Value probe;  // the cell's probe output (load times), null when not run
  bool failed() const;
  json::Value to_json() const;
};

struct InventoryInputs {
  std::string source_dir;
  std::string build_dir;
  std::string work_dir;  // the cell's result dir (probe cache, logs)
  std::string log_path;
  double timeout_s = 300;
};

Inventory check_inventory(const InventoryInputs& in, const OpManifest& manifest);

}  // namespace opf::matrix
