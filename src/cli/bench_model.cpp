#include "cli/commands.h"

namespace shardlm::cli {

// Placeholder until the owning module lands.
void add_bench_model(CLI::App& bench) { (void)bench; }

}  // namespace shardlm::cli
