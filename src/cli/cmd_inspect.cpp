#include "cli/commands.h"
#include "core/error.h"

namespace shardlm::cli {

// Placeholder until the owning module lands.
void add_inspect(CLI::App& app) {
  app.add_subcommand("inspect", "(not built yet)")->callback([] { throw Error("'inspect' is not implemented yet"); });
}

}  // namespace shardlm::cli
