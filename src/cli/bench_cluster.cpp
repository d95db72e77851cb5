// `shardlm bench -m MODEL --nodes ...`: the model benchmark on workers, over
// the cluster engine (serve/cluster_engine.h). One job runs three periods
// closed by marks: a one-token warm-up that faults the slices in, the prompt
// (its steps' time is prompt processing) and the decode steps of the same
// sequence. The workers report their RankStats per period.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>

#include "cli/bench_common.h"
#include "cli/run_cluster.h"
#include "cli/usage.h"
#include "cluster/logging.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "serve/cluster_engine.h"

namespace shardlm::cli {
namespace {

constexpr int kMinTimedTokens = 16;
constexpr double kMinTimedSeconds = 0.05;


enum Period { kWarmUp, kPrompt, kDecode };

// Every worker's stats of one period, the driver's first.
std::vector<parallel::RankStats> period_stats(const std::vector<std::vector<cluster::RequestStats>>& all,
                                                 const std::vector<std::string>& nodes, Period p) {
  std::vector<parallel::RankStats> out;
  for (size_t w = 0; w < all.size(); ++w) {
    if (all[w].size() <= size_t(p))
      throw Error(fmt::format("worker {} reported {} periods' stats, expected {}", nodes[w], all[w].size(), int(p) + 1));
    out.push_back(all[w][p].total);
  }
  return out;
}

void print_breakdown_row(const char* phase, const std::vector<parallel::RankStats>& s, double tokens,
                         const parallel::Plan& plan) {
  double bytes = 0;
  for (const auto& w : s) bytes += w.bytes_sent;
  const auto b = step_breakdown(s[0], tokens, tokens > 0 ? bytes / tokens : 0, plan.min_wire_bytes_per_token);
  std::printf("| %s | %.3f | %s |\n", phase, tokens > 0 ? s[0].total_seconds / tokens * 1e3 : 0.0,
              breakdown_cells(b).c_str());
}

}  // namespace

void bench_on_cluster(const ClusterRunOptions& c, const ClusterBenchRequest& r) {
  if (r.prompt < 1) throw UsageError("--prompt: a benchmark on workers needs at least 1 prompt token");
  if (r.gen > 0 && r.gen < kMinTimedTokens)
    throw UsageError(fmt::format("--gen: {} decoded tokens are too few to time on workers (at least {}, or 0)", r.gen,
                                 kMinTimedTokens));
  cluster::log_to_stderr();
  const int batch = std::min(r.batch, r.prompt);
  auto o = make_cluster_options(c, int64_t(r.prompt) + r.gen + 1, batch, r.kv_type, r.threads);
  auto file = gguf::File::open(r.model);
  const auto config = ModelConfig::from_gguf(*file);
  const auto prompt = bench_prompt_tokens(r.prompt, config.n_vocab);

  serve::ClusterEngine engine([&](auto) { return std::make_unique<cluster::ClusterJob>(*file, o); }, 1, o.plan.n_ctx,
                              o.n_batch, config.n_vocab);
  const cluster::ClusterJob& job = engine.job();
  const auto& plan = job.plan();
  const auto& setup = job.stats();
  SamplerParams greedy;
  greedy.temperature = 0;
  engine.add(0, greedy, {});
  feed(engine, std::span(prompt).first(1), 0, batch);
  engine.free(0);
  engine.mark();
  engine.add(0, greedy, {});
  TokenId next = feed(engine, prompt, 0, batch);
  engine.mark();
  for (int i = 0; i < r.gen; ++i) next = feed(engine, std::span(&next, 1), r.prompt + i, batch);
  engine.free(0);
  engine.mark();
  const auto worker_stats = engine.finish();
  // The driving worker's own clock: the coordinator's round trip per step is not in it.
  const double prompt_s = period_stats(worker_stats, o.nodes, kPrompt)[0].total_seconds;
  const double decode_s = r.gen > 0 ? period_stats(worker_stats, o.nodes, kDecode)[0].total_seconds : 0;
  if (r.gen > 0 && decode_s < kMinTimedSeconds)
    spdlog::warn("decode took {:.1f} ms on the driving worker: too short to time well; raise --gen", decode_s * 1e3);

  const std::string threads = r.threads > 0 ? std::to_string(r.threads) : "all cores";
  std::printf("model:   %s (%.1f MiB file)\n", r.model.c_str(), double(file->file_size()) / (1 << 20));
  std::printf("config:  %s\n", config.summary().c_str());
  std::printf("cluster: %d workers, tp %d × pp %d; slices sent %.1f MiB, %d workers had theirs cached%s\n",
              plan.size(), plan.tp, plan.pp, double(setup.bytes_sent) / (1 << 20), setup.cached,
              o.worker_model.empty() ? "" : " (workers map their own model)");
  std::printf("setup:   %.1f ms (connect, plan, slices, communicator); prompt %d tokens (batch %d), decode %d tokens, "
              "KV %s, threads per worker: %s\n\n",
              setup.setup_seconds * 1e3, r.prompt, batch, r.gen, r.kv_type.c_str(), threads.c_str());
  const double prompt_tps = r.prompt / prompt_s, decode_tps = r.gen > 0 ? r.gen / decode_s : 0;
  std::printf("| layout | threads/worker | prompt tok/s | decode tok/s | plan decode tok/s | of plan |\n");
  std::printf("|---|---:|---:|---:|---:|---:|\n");
  std::printf("| tp %d × pp %d on %d node%s | %s | %.1f | %.2f | %.2f | %.0f%% |\n", plan.tp, plan.pp, plan.size(),
              plan.size() == 1 ? "" : "s", threads.c_str(), prompt_tps, decode_tps, plan.single_seq_tok_s,
              100.0 * decode_tps / plan.single_seq_tok_s);

  std::printf("\n| phase | ms/token | %s |\n", kBreakdownColumns);
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  print_breakdown_row("prompt", period_stats(worker_stats, o.nodes, kPrompt), r.prompt, plan);
  if (r.gen > 0) print_breakdown_row("decode", period_stats(worker_stats, o.nodes, kDecode), r.gen, plan);
  std::printf("(tokens/s and per token: times measured on the first worker, which drives; wire bytes of all "
              "workers)\n");
}

}  // namespace shardlm::cli
