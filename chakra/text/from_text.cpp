#include "from_text.h"

#include <cstdio>

#include "input_error.h"
#include "output_set.h"
#include "text_graph.h"
#include "text_workload.h"

namespace opf::chakra {

FromTextStats from_text(const std::string& workload, const std::string& prefix, const FromTextOptions& opt) {
  auto warn =
      opt.warn ? opt.warn : [](const std::string& w) { std::fprintf(stderr, "opforge: warning: %s\n", w.c_str()); };
  if (opt.npus == 0) throw InputError("--npus", "", "must be at least 1");
  // the reference writes metadata-only files for 0 passes; that is its byte format, so compat keeps it
  if (opt.passes == 0 && !opt.compat_reference) throw InputError("--passes", "", "must be at least 1");

  TextReadOptions ro;
  ro.compat_reference = opt.compat_reference;
  ro.warn = warn;
  TextWorkload w = read_text_workload(workload, ro);
  TextGraphOptions go;
  go.compat_reference = opt.compat_reference;
  go.passes = opt.passes;
  go.warn = warn;
  TextGraphBuilder builder(w, go);

  OutputSet outs;
  std::string bytes;
  for (uint64_t npu = 0; npu < opt.npus; ++npu) {
    // default mode: every NPU's file is the same, build it once
    if (npu == 0 || opt.compat_reference) bytes = builder.build_npu();
    outs.add(prefix + "." + std::to_string(npu) + ".et", bytes);
  }
  outs.publish();
  FromTextStats stats;
  stats.files = outs.size();
  stats.nodes_per_file = builder.nodes_written();
  return stats;
}

}  // namespace opf::chakra
