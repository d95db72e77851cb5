#include "cli/commands.h"

namespace shardlm::cli {

void add_bench(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "benchmarks: a model (-m), `kernels` or `comm`");
  add_bench_model(bench[0]);
  add_bench_kernels(bench[0]);
  add_bench_comm(bench[0]);
  add_bench_dist(bench[0]);
  add_bench_serve(bench[0]);
}

}  // namespace shardlm::cli
