// The flashattn program: one CLI11 app whose subcommands are registered from cli/commands.h.
// Every failure, from the command line or from the computation, ends as one line on stderr that starts with
// "flashattn: error: " and a non-zero exit status.
#include <exception>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "commands.h"

namespace {

// Error messages may quote user input; keep the report on one line.
std::string OneLine(std::string text) {
  for (char& c : text)
    if (c == '\n' || c == '\r') c = ' ';
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"flashattn: exact, IO-aware attention for CPUs (FlashAttention-1/2 and their references)"};
  app.require_subcommand(1);
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return "flashattn: error: " + OneLine(e.what()) + "\n";
  });
  flashattn::cli::AddRunCommand(app);
  flashattn::cli::AddDemoCommand(app);
  flashattn::cli::AddIoCommand(app);
#ifdef FLASHATTN_WITH_BENCH
  flashattn::cli::AddBenchCommand(app);
#endif
  try {
    app.parse(argc, argv);  // the chosen subcommand runs from its callback
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::cerr << "flashattn: error: " << OneLine(e.what()) << "\n";
    return 1;
  }
  return 0;
}
