// `mpirun -np N shardlm bench -m MODEL --backend mpi ...`: the model benchmark
// on the ranks an MPI launcher started. Rank 0 drives the step engine as the
// worker benchmark does (bench_cluster.cpp): a one-token warm-up, the prompt,
// then one decode step per token, each phase on rank 0's clock.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <span>

#include "cli/bench_common.h"
#include "cli/run_cluster.h"
#include "cli/usage.h"
#include "cluster/logging.h"
#include "cluster/mpi_job.h"
#include "core/clock.h"
#include "serve/session_engine.h"
#include "model/config.h"
#include "parallel/wire_format.h"

namespace shardlm::cli {

void bench_on_mpi(const ClusterRunOptions& c, const ClusterBenchRequest& r) {
  if (r.prompt < 1) throw UsageError("--prompt: a benchmark over MPI ranks needs at least 1 prompt token");
  cluster::log_to_stderr();
  const int batch = std::min(r.batch, r.prompt);
  auto options = make_mpi_job_options(c, int64_t(r.prompt) + r.gen + 1, batch, r.kv_type, r.threads, 1);
  options.only_this_thread_calls = true;
  cluster::MpiJob job(r.model, options);
  if (job.rank() != 0) {
    job.finish();
    return;
  }
  auto& session = job.session();
  serve::SessionEngine engine(session);
  const auto& plan = job.plan();
  const auto config = session.model().config();
  const auto prompt = bench_prompt_tokens(r.prompt, config.n_vocab);
  SamplerParams greedy;
  greedy.temperature = 0;

  engine.add(0, greedy, {});  // warm-up: faults the slices in
  feed(engine, std::span(prompt).first(1), 0, batch);
  engine.free(0);
  engine.add(0, greedy, {});
  auto t = SteadyClock::now();
  TokenId next = feed(engine, prompt, 0, batch);
  const double prompt_s = seconds_since(t);
  session.reset_stats();
  t = SteadyClock::now();
  for (int i = 0; i < r.gen; ++i) next = feed(engine, std::span(&next, 1), r.prompt + i, batch);
  const double decode_s = seconds_since(t);
  const parallel::RankStats decode_stats = session.stats();
  engine.free(0);
  job.finish();

  const std::string threads = r.threads > 0 ? std::to_string(r.threads) : "host cores / ranks, within a binding named to mpirun";
  std::printf("model:   %s\n", r.model.c_str());
  std::printf("config:  %s\n", config.summary().c_str());
  std::printf("mpi:     %d ranks, tp %d × pp %d, wire %s; prompt %d tokens (batch %d), decode %d tokens, KV %s, "
              "threads per rank: %s\n\n",
              job.world_size(), plan.tp, plan.pp, parallel::wire_type_name(plan.wire_type).c_str(), r.prompt, batch,
              r.gen, r.kv_type.c_str(), threads.c_str());
  const double decode_tps = decode_s > 0 ? r.gen / decode_s : 0;
  std::printf("| layout | prompt tok/s | decode tok/s | plan decode tok/s | rank 0 compute ms/token | "
              "collective ms/token | p2p wait ms/token |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  const double per = r.gen > 0 ? 1e3 / r.gen : 0;
  std::printf("| tp %d × pp %d over mpi | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", plan.tp, plan.pp,
              r.prompt / prompt_s, decode_tps, plan.single_seq_tok_s,
              (decode_stats.forward_seconds - decode_stats.all_reduce_seconds) * per,
              decode_stats.collective_seconds * per, decode_stats.p2p_wait_seconds * per);
}

}  // namespace shardlm::cli
