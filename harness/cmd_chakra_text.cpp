// `opforge chakra from-text WORKLOAD... --npus N [--passes P] -o OUT [--compat reference] [-j J]`:
// ASTRA-sim text workloads -> Chakra .et files. One workload: OUT is the prefix, files
// OUT.<npu>.et. Several: OUT is a directory, files OUT/<name>.<npu>.et (<name>: the workload's
// file name without .txt), converted in parallel (-j, default one per core). Bad input (file or
// options): one line "FILE:LINE: problem" on stderr per failed workload, exit status 2, no file
// written for that workload (the others are).
#include <cstdio>
#include <map>

#include "command.h"
#include "from_text.h"
#include "input_error.h"
#include "parallel_files.h"

namespace opf::cli {

namespace {

std::string stem_of(const std::string& path) {
  std::string s = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  if (s.size() > 4 && s.compare(s.size() - 4, 4, ".txt") == 0) s.resize(s.size() - 4);
  return s;
}

}  // namespace

void add_chakra_text_command(CLI::App& chakra) {
  auto* sub =
      chakra.add_subcommand("from-text", "ASTRA-sim text workload -> Chakra .et, one file per NPU (PREFIX.<npu>.et)");
  struct Args {
    std::vector<std::string> workloads;
    std::string out, compat;
    uint64_t npus = 0, passes = 1;
    int jobs = 0;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("workload", a->workloads, "text workload(s) (first line: MICRO, DATA, MODEL, HYBRID_*)")->required();
  sub->add_option("--npus", a->npus, "number of NPUs (files)")->required();
  sub->add_option("--passes", a->passes, "training passes per file (default 1)");
  sub->add_option("-o,--output", a->out,
                  "one workload: output prefix, writes PREFIX.0.et ... PREFIX.<N-1>.et; several: a directory, "
                  "writes DIR/<workload name>.<npu>.et")
      ->required();
  sub->add_option("--compat", a->compat, "'reference': the MLCommons text converter's bytes, bugs included");
  sub->add_option("-j,--jobs", a->jobs, "convert this many workloads in parallel (default: one per core)");
  on_run(sub, [a] {
    const auto& ws = a->workloads;
    std::vector<std::string> prefixes, errors(ws.size());
    try {
      if (!a->compat.empty() && a->compat != "reference")
        throw chakra::InputError("--compat", "", "unknown value '" + a->compat + "' (only 'reference')");
      std::map<std::string, const std::string*> seen;
      for (const auto& w : ws) {
        prefixes.push_back(ws.size() == 1 ? a->out : a->out + "/" + stem_of(w));
        if (auto [it, fresh] = seen.emplace(prefixes.back(), &w); !fresh)
          throw chakra::InputError(w, "", "same output name as " + *it->second + " (" + prefixes.back() + ".<npu>.et)");
      }
    } catch (const chakra::InputError& e) {
      std::fprintf(stderr, "opforge: %s\n", e.what());
      return 2;
    }
    chakra::FromTextOptions o;
    o.npus = a->npus;
    o.passes = a->passes;
    o.compat_reference = !a->compat.empty();
    chakra::for_each_file(ws.size(), a->jobs, [&](size_t k) {
      try {
        chakra::from_text(ws[k], prefixes[k], o);
      } catch (const std::exception& e) {
        errors[k] = e.what();
      }
    });
    int rc = 0;
    for (const auto& e : errors)
      if (!e.empty()) {
        std::fprintf(stderr, "opforge: %s\n", e.c_str());
        rc = 2;
      }
    return rc;
  });
}

}  // namespace opf::cli
