// `mpirun -np N shardlm run -m MODEL --backend mpi ...`: the ranks the MPI
// launcher started are the cluster (cluster/mpi_job.h). Rank 0 tokenizes and
// prints the same story as single-node `run`; the other ranks follow it.
#include <fmt/format.h>

#include <cstdio>
#include <set>

#include "cli/run_cluster.h"
#include "cli/scheduled_run.h"
#include "cli/usage.h"
#include "cluster/logging.h"
#include "cluster/mpi_job.h"
#include "core/dtype.h"
#include "core/error.h"
#include "parallel/wire_format.h"
#include "serve/session_engine.h"
#include "tokenizer/tokenizer.h"

namespace shardlm::cli {

cluster::MpiJobOptions make_mpi_job_options(const ClusterRunOptions& c, int64_t ctx, int64_t batch,
                                            const std::string& kv_type, int threads, int64_t n_seq) {
  if (!cluster::started_by_mpi_launcher())
    throw UsageError("--backend mpi: start shardlm with mpirun, mpiexec or srun (no MPI rank in the environment)");
  cluster::MpiJobOptions o;
  o.plan = plan_request(c, ctx, kv_type_of(kv_type));
  o.plan.n_seq = n_seq;
  o.runtime.n_ctx = ctx;
  o.runtime.n_seq = n_seq;
  o.runtime.n_batch = batch;
  o.runtime.kv_type = o.plan.kv_type;
  o.runtime.threads = threads;
  o.runtime.time_kernels_at_load = true;  // as `serve` and the workers' jobs: not in the first request
  o.distribute_weights = c.distribute_weights;
  o.cache_dir = c.cache_dir;
  if (!c.cache_dir.empty() && !c.distribute_weights)
    throw UsageError("--cache-dir: only with --distribute-weights (the ranks read the model themselves otherwise)");
  return o;
}

void run_on_mpi(const ClusterRunOptions& c, const ClusterRunRequest& r) {
  cluster::log_to_stderr();
  // One KV slot; a step holds a prompt chunk of --batch or a decode entry.
  auto options = make_mpi_job_options(c, r.ctx, r.batch + 1, r.kv_type, r.threads, 1);
  options.only_this_thread_calls = true;
  cluster::MpiJob job(r.model, options);
  if (job.rank() != 0) {
    job.finish();
    return;
  }
  auto tokenizer = Tokenizer::from_gguf(job.file());
  const auto prompt = tokenizer->encode(r.prompt, /*add_special=*/true, /*parse_special=*/true);
  // Rank 0 ends the followers before it reports a bad prompt, so none waits for it.
  auto fail = [&](const std::string& why) {
    job.finish();
    throw Error(why);
  };
  if (const std::string problem = prompt_fit_problem(prompt.size(), r.ctx); !problem.empty()) fail(problem);
  warn_if_beyond_training(job.session().model().config(), r.ctx);

  serve::SessionEngine engine(job.session());
  const ScheduledRunResult result = run_scheduled(
      engine, *tokenizer, {r.prompt, prompt, r.sampling, r.n_predict, r.stops, r.display_prompt, r.batch, nullptr});
  job.finish();
  if (result.context_full) note_context_full(r.ctx);

  const auto& plan = job.plan();
  const double gen_s = result.prompt_seconds + result.decode_seconds;
  std::fprintf(stderr, "\n%s\n", job.session().model().config().summary().c_str());
  std::fprintf(stderr, "mpi: %d ranks on %zu host(s), tp %d × pp %d, wire %s\n", job.world_size(),
               std::set<std::string>(job.hosts().begin(), job.hosts().end()).size(), plan.tp, plan.pp,
               parallel::wire_type_name(plan.wire_type).c_str());
  std::fprintf(stderr, "generate: %4lld tokens in %8.1f ms (prompt %zu tokens included) = %.1f tok/s\n",
               static_cast<long long>(result.generated), gen_s * 1e3, prompt.size(),
               gen_s > 0 ? double(result.generated) / gen_s : 0.0);
}

}  // namespace shardlm::cli
