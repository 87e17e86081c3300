// flashattn demo: every algorithm on one workload (work in progress).
#include <stdexcept>

#include "commands.h"

namespace flashattn::cli {

void AddDemoCommand(CLI::App& app) {
  CLI::App* demo = app.add_subcommand("demo", "Run every algorithm on one workload and compare them");
  demo->callback([] { throw std::runtime_error("demo: not implemented yet"); });
}

}  // namespace flashattn::cli
