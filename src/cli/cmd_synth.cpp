#include "cli/commands.h"
#include "core/error.h"

namespace shardlm::cli {

// Placeholder until the owning module lands.
void add_synth(CLI::App& app) {
  app.add_subcommand("synth", "(not built yet)")->callback([] { throw Error("'synth' is not implemented yet"); });
}

}  // namespace shardlm::cli
