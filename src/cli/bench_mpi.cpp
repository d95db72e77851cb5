// `mpirun -np N shardlm bench -m MODEL --backend mpi ...`: the model benchmark
// on the ranks an MPI launcher started. Rank 0 drives and times three
// requests as the worker benchmark does (bench_cluster.cpp): a one-token
// warm-up, the prompt alone, the prompt with the decoded tokens (timed from
// its first token on).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>

#include "cli/bench_common.h"
#include "cli/run_cluster.h"
#include "cli/usage.h"
#include "cluster/logging.h"
#include "cluster/mpi_job.h"
#include "model/config.h"
#include "parallel/wire_format.h"

namespace shardlm::cli {

void bench_on_mpi(const ClusterRunOptions& c, const ClusterBenchRequest& r) {
  using Clock = std::chrono::steady_clock;
  if (r.prompt < 1) throw UsageError("--prompt: a benchmark over MPI ranks needs at least 1 prompt token");
  cluster::log_to_stderr();
  const int batch = std::min(r.batch, r.prompt);
  cluster::MpiJob job(r.model, make_mpi_job_options(c, int64_t(r.prompt) + r.gen + 1, batch, r.kv_type, r.threads, 1));
  if (job.rank() != 0) {
    job.finish();
    return;
  }
  auto& session = job.session();
  const auto& plan = job.plan();
  const auto config = session.model().config();
  parallel::GenerateRequest q;
  q.prompts = {bench_prompt_tokens(r.prompt, config.n_vocab)};
  q.sampling.temperature = 0;
  const auto seconds = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };

  parallel::GenerateRequest warm_up = q;
  warm_up.prompts[0].resize(1);
  warm_up.n_predict = 1;
  session.generate(warm_up, [](int, TokenId) {});
  q.n_predict = 1;
  auto t = Clock::now();
  session.generate(q, [](int, TokenId) {});
  const double prompt_s = seconds(t);
  double decode_s = 0;
  parallel::RuntimeStats at_first;
  if (r.gen > 0) {
    q.n_predict = r.gen + 1;
    session.reset_stats();
    bool first = true;
    session.generate(q, [&](int, TokenId) {
      if (!first) return;
      t = Clock::now();  // decode starts at the first generated token
      at_first = session.stats();
      first = false;
    });
    decode_s = seconds(t);
  }
  parallel::RuntimeStats decode_stats = session.stats();
  decode_stats.forward_seconds -= at_first.forward_seconds;
  decode_stats.all_reduce_seconds -= at_first.all_reduce_seconds;
  decode_stats.collective_seconds -= at_first.collective_seconds;
  decode_stats.p2p_wait_seconds -= at_first.p2p_wait_seconds;
  job.finish();

  const std::string threads = r.threads > 0 ? std::to_string(r.threads) : "host cores / ranks";
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
