// Golden regression over the trace corpus (chakra/tests/data/traces): every trace is converted
// (and jsonized), and compared (a) byte for byte with the reference tool's outputs where they
// exist (--compat reference: *.ref.et, *.ref.et.jsonized.json, simulation logs), and (b) with
// a reviewed golden summary in chakra/tests/golden/ (one canonical line per node, gzip), so a
// difference names the changed nodes and fields. `update` rewrites the goldens and prints the
// difference. Used by the GoogleTest suite and by `opforge chakra regress`.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace opf::chakra {

struct RegressCase {
  std::string name;          // golden file stem
  std::string input;         // relative to the traces dir
  bool compat = false;       // --compat reference
  bool input_is_et = false;  // .et input: jsonize/validate/simulate only
  std::string ref_et;        // reference .et (byte equality), relative, optional
  std::string ref_json;      // reference jsonizer output (byte equality), optional
  std::string ref_log;       // reference convert --simulate log (lines after the prefix), optional
};

const std::vector<RegressCase>& regress_cases();

struct RegressOptions {
  std::string traces_dir, golden_dir, work_dir;  // work_dir: temp outputs (default: a mkdtemp dir)
  bool update = false;
  std::string only;  // run just this case name
};

struct CaseResult {
  std::string name;
  bool ok = true;
  std::vector<std::string> messages;  // differences, or why it failed (a missing input fails)
};

std::vector<CaseResult> regress(const RegressOptions& opt);
// CLI wrapper: prints one line per case plus the differences; true if all passed and at least
// one trace was checked (a run that checked nothing says why and fails).
bool run_regress(const RegressOptions& opt, const std::function<void(const std::string&)>& print);

std::string default_traces_dir();
std::string default_golden_dir();

// canonical one-line-per-node summary of an .et file (what the goldens store)
std::string et_summary(const std::string& et_path);
// differences between two summaries, naming nodes and fields (at most `limit` lines)
std::vector<std::string> diff_summaries(const std::string& golden, const std::string& now, size_t limit = 20);

}  // namespace opf::chakra
