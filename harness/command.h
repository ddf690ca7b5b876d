// The opforge CLI is one CLI11 app; each subcommand lives in its own file and registers itself
// through one add_<name>_command() function listed in main.cpp.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace opf::cli {

// Registers `run` as the action of subcommand `sub`; its return value is the process exit code.
void on_run(CLI::App* sub, std::function<int()> run);

void add_ops_command(CLI::App& app);
void add_op_command(CLI::App& app);
void add_clean_command(CLI::App& app);
void add_test_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_chakra_command(CLI::App& app);               // only when built with -Dchakra
void add_chakra_link_commands(CLI::App& chakra);      // link/scale/synth under `opforge chakra`
void add_chakra_text_command(CLI::App& chakra);       // from-text
void add_chakra_generate_command(CLI::App& chakra);   // generate
void add_chakra_visualize_command(CLI::App& chakra);  // visualize
void add_chakra_timeline_command(CLI::App& chakra);   // timeline
void add_matrix_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_gate_command(CLI::App& app);
void add_ab_command(CLI::App& app);
void add_merge_command(CLI::App& app);
void add_run_command(CLI::App& app);

}  // namespace opf::cli
