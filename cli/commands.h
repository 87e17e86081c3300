// The subcommands of the flashattn program, one file each; main.cc registers them with CLI11.
#ifndef FLASHATTN_CLI_COMMANDS_H_
#define FLASHATTN_CLI_COMMANDS_H_

#include <CLI/CLI.hpp>

namespace flashattn::cli {

void AddRunCommand(CLI::App& app);   // run_command.cc
void AddDemoCommand(CLI::App& app);  // demo_command.cc
void AddIoCommand(CLI::App& app);    // io_command.cc
void AddBenchCommand(CLI::App& app);  // bench/bench_command.cc (the flashattn_bench library)

}  // namespace flashattn::cli

#endif  // FLASHATTN_CLI_COMMANDS_H_
