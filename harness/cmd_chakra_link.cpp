// `opforge chakra link | scale | synth-kineto`: the linker (PyTorch host ET + Kineto -> linked
// JSON) and the tools that make large linkable inputs for benchmarks.
#include <cstdio>
#include <string>

#include "command.h"
#include "tools/et_scale.h"
#include "tools/kineto_synth.h"
#include "trace_linker.h"

namespace opf::cli {

void add_chakra_link_commands(CLI::App& chakra) {
  {
    auto* sub = chakra.add_subcommand("link", "Link a PyTorch host execution trace with its Kineto trace");
    auto opt = std::make_shared<chakra::LinkOptions>();
    auto compat = std::make_shared<std::string>();
    auto quiet = std::make_shared<bool>(false);
    sub->add_option("--host,--chakra-host-trace", opt->host_path, "host execution trace JSON (.gz ok)")->required();
    sub->add_option("--kineto,--chakra-device-trace", opt->kineto_path, "Kineto trace JSON (.gz ok)")->required();
    sub->add_option("-o,--output,--output-file", opt->output_path, "linked JSON to write (.gz => gzip)")->required();
    sub->add_option("--rank", opt->rank, "rank of the traces (kept for CLI compatibility)");
    sub->add_option("--compat", *compat, "'reference': reproduce the MLCommons reference linker's graph")
        ->check(CLI::IsMember({"reference"}));
    sub->add_flag("--indent", opt->pretty,
                  "json.dump(indent=4) layout, as the reference writes (always on with --compat reference)");
    sub->add_flag("-q,--quiet", *quiet, "no summary line");
    on_run(sub, [opt, compat, quiet] {
      opt->compat_reference = *compat == "reference";
      auto s = chakra::link_traces(*opt);
      if (!*quiet) {
        std::fprintf(stderr, "linked %s: %zu host nodes, %zu matched via %s", opt->output_path.c_str(), s.host_nodes,
                     s.matched, s.match_key.c_str());
        if (s.match_key == "External id")
          std::fprintf(stderr, " (External id = rf_id + offset; %s; %zu candidates rejected: names differ)",
                       s.external_id_offsets.c_str(), s.matched_name_mismatch);
        std::fprintf(stderr,
                     "; %zu GPU ops parented (%zu orphaned), %zu GPU nodes, %zu inter-thread deps, %zu nodes written\n",
                     s.gpu_ops_parented, s.gpu_ops_orphaned, s.gpu_nodes_emitted, s.inter_thread_deps, s.output_nodes);
        if (s.match_key != "External id" && s.matched_name_mismatch > 0)
          std::fprintf(stderr,
                       "opforge: warning: %zu of %zu matched host ops have a Kineto op of another name: are the traces "
                       "from the same run?\n",
                       s.matched_name_mismatch, s.matched);
      }
      return 0;
    });
  }
  {
    auto* sub =
        chakra.add_subcommand("scale", "Replicate the nodes of a host execution trace N times (benchmark input)");
    auto in = std::make_shared<std::string>(), out = std::make_shared<std::string>();
    auto times = std::make_shared<int64_t>(10);
    sub->add_option("input", *in, "host execution trace JSON (.gz ok)")->required();
    sub->add_option("-o,--output", *out, "scaled trace to write (.gz => gzip)")->required();
    sub->add_option("-n,--times", *times, "replication factor (default 10)")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
    on_run(sub, [in, out, times] {
      auto s = chakra::scale_host_et(*in, *out, *times);
      std::fprintf(stderr, "scaled %s x%lld: %zu nodes (%zu roots kept once)\n", out->c_str(),
                   static_cast<long long>(*times), s.output_nodes, s.root_nodes);
      return 0;
    });
  }
  {
    auto* sub =
        chakra.add_subcommand("synth-kineto", "Generate a seeded synthetic Kineto trace for a host execution trace");
    auto in = std::make_shared<std::string>(), out = std::make_shared<std::string>();
    auto seed = std::make_shared<uint64_t>(1);
    sub->add_option("--host", *in, "host execution trace JSON (.gz ok)")->required();
    sub->add_option("-o,--output", *out, "Kineto JSON to write (.gz => gzip)")->required();
    sub->add_option("--seed", *seed, "random seed for the timings (default 1)");
    on_run(sub, [in, out, seed] {
      auto s = chakra::synth_kineto(*in, *out, *seed);
      std::fprintf(stderr, "wrote %s: %zu cpu ops on %zu threads, %zu launches, %zu GPU ops (seed %llu)\n",
                   out->c_str(), s.cpu_ops, s.threads, s.launches, s.gpu_ops, static_cast<unsigned long long>(*seed));
      return 0;
    });
  }
}

}  // namespace opf::cli
