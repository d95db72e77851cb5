// shardlm worker: serve cluster jobs from coordinators (cluster/worker.h);
// shardlm worker-job (hidden): one job, in the process the daemon spawns for it.
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>

#include <cstdlib>
#include <limits>

#include "cli/cluster_token.h"
#include "cli/commands.h"
#include "cli/usage.h"
#include "cluster/logging.h"
#include "cluster/worker.h"
#include "cluster/worker_job.h"
#include "comm/transport.h"
#include "net/socket.h"

namespace shardlm::cli {

void add_worker(CLI::App& app) {
  auto o = std::make_shared<cluster::WorkerOptions>();
  auto token_file = std::make_shared<std::string>();
  auto probe_mib = std::make_shared<int>(64);
  auto* cmd = app.add_subcommand("worker", "serve cluster jobs: a coordinator sends the slices of the model to run");
  cmd->add_option("--listen", o->listen, "address:port to accept coordinators on")->capture_default_str();
  cmd->add_option("--token-file", *token_file, "file whose first line is the cluster token (wins over $SHARDLM_TOKEN)");
  cmd->add_option("--cache-dir", o->cache_dir, "keep received slices here, keyed by content hash");
  cmd->add_option("--cache-max-bytes", o->cache_max_bytes,
                  "most bytes of slices kept in --cache-dir; least recently used go first (0 = no limit)")
      ->capture_default_str()
      ->check(integer_in(0, std::numeric_limits<long long>::max()));
  cmd->add_option("--port-file", o->port_file, "write the port listened on to this file (for --listen ...:0)");
  cmd->add_option("--probe-mib", *probe_mib, "memory-bandwidth probe size at start; 0 = skip")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--max-jobs", o->max_jobs, "exit after this many jobs; default: serve forever")
      ->check(CLI::Range(1, 1 << 30));
  cmd->callback([o, token_file, probe_mib] {
    try {
      (void)net::parse_host_port(o->listen, "--listen");
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
    cluster::log_to_stderr();
    o->token = cluster_token(*token_file);
    o->probe_bytes = size_t(*probe_mib) << 20;
    o->log_level = std::string(spdlog::level::to_string_view(spdlog::get_level()).data(),
                               spdlog::level::to_string_view(spdlog::get_level()).size());
    cluster::Worker worker(*o);
    worker.serve();
  });

  // The daemon passes the authenticated connection as fd 3 and the job's context as fd 4.
  auto* job = app.add_subcommand("worker-job", "");
  job->group("");  // hidden: only the daemon starts it
  job->callback([] {
    cluster::log_to_stderr();
    std::string text;
    char buf[4096];
    for (ssize_t n; (n = ::read(4, buf, sizeof buf)) > 0;) text.append(buf, size_t(n));
    ::close(4);
    const auto context = cluster::job_context_from_text(text);
    // A job outlives neither its daemon (killed, the job is too) nor the check below.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != context.daemon_pid) std::exit(3);
    const int status = cluster::serve_job(3, context);
    spdlog::default_logger()->flush();
    if (status != 0) std::exit(status);
  });
}

}  // namespace shardlm::cli
