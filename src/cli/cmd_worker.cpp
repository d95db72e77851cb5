// shardlm worker: serve cluster jobs from coordinators (cluster/worker.h).
#include "cli/commands.h"
#include "cluster/logging.h"
#include "cluster/worker.h"
#include "comm/transport.h"

namespace shardlm::cli {

void add_worker(CLI::App& app) {
  auto o = std::make_shared<cluster::WorkerOptions>();
  auto token_file = std::make_shared<std::string>();
  auto probe_mib = std::make_shared<int>(64);
  auto* cmd = app.add_subcommand("worker", "serve cluster jobs: a coordinator sends the slices of the model to run");
  cmd->add_option("--listen", o->listen, "address:port to accept coordinators on")->capture_default_str();
  cmd->add_option("--token-file", *token_file, "file whose first line is the cluster token (or $SHARDLM_TOKEN)");
  cmd->add_option("--cache-dir", o->cache_dir, "keep received slices here, keyed by content hash");
  cmd->add_option("--port-file", o->port_file, "write the port listened on to this file (for --listen ...:0)");
  cmd->add_option("--probe-mib", *probe_mib, "memory-bandwidth probe size at start; 0 = skip")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--max-jobs", o->max_jobs, "exit after this many jobs; default: serve forever");
  cmd->callback([o, token_file, probe_mib] {
    cluster::log_to_stderr();
    o->token = comm::load_token(*token_file);
    o->probe_bytes = size_t(*probe_mib) << 20;
    cluster::Worker worker(*o);
    worker.serve();
  });
}

}  // namespace shardlm::cli
