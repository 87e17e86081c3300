// flashattn run: attention over .npy inputs (work in progress).
#include <stdexcept>

#include "commands.h"

namespace flashattn::cli {

void AddRunCommand(CLI::App& app) {
  CLI::App* run = app.add_subcommand("run", "Compute attention over .npy files");
  run->callback([] { throw std::runtime_error("run: not implemented yet"); });
}

}  // namespace flashattn::cli
