#include "cli/commands.h"
#include "core/error.h"

namespace shardlm::cli {

// Placeholder until the owning module lands.
void add_run(CLI::App& app) {
  app.add_subcommand("run", "(not built yet)")->callback([] { throw Error("'run' is not implemented yet"); });
}

}  // namespace shardlm::cli
