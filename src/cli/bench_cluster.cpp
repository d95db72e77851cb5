// `shardlm bench -m MODEL --nodes ...`: the model benchmark on workers. One
// job runs three requests: a one-token warm-up that faults the slices in, the
// prompt alone (its time is prompt processing), and the prompt followed by
// the decoded tokens (the time after its first token is decode). The workers
// report their RuntimeStats per request; the driving worker also up to the
// first token, which splits the third request into its two phases. Bytes on
// the wire are counts, so the other workers' decode share is exactly the
// third request less the second.
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

namespace shardlm::cli {
namespace {

constexpr int kMinTimedTokens = 16;
constexpr double kMinTimedSeconds = 0.05;


parallel::RuntimeStats minus(parallel::RuntimeStats a, const parallel::RuntimeStats& b) {
  a.forward_seconds -= b.forward_seconds;
  a.collective_seconds -= b.collective_seconds;
  a.all_reduce_seconds -= b.all_reduce_seconds;
  a.p2p_wait_seconds -= b.p2p_wait_seconds;
  a.total_seconds -= b.total_seconds;
  a.all_reduces -= b.all_reduces;
  a.forward_calls -= b.forward_calls;
  a.tokens -= b.tokens;
  a.bytes_sent -= b.bytes_sent;
  return a;
}

enum Request { kWarmUp, kPromptOnly, kPromptAndDecode };

// The driver's (first) and every other worker's stats of one phase.
std::vector<parallel::RuntimeStats> phase_stats(const std::vector<std::vector<cluster::RequestStats>>& all,
                                                const std::vector<std::string>& nodes, Request q) {
  std::vector<parallel::RuntimeStats> out;
  for (size_t w = 0; w < all.size(); ++w) {
    if (all[w].size() <= size_t(q))
      throw Error(fmt::format("worker {} reported {} requests' stats, expected {}", nodes[w], all[w].size(), int(q) + 1));
    const auto& r = all[w][q];
    if (q != kPromptAndDecode) out.push_back(r.total);
    else if (w > 0) out.push_back(minus(r.total, all[w][kPromptOnly].total));
    else if (r.to_first_token) out.push_back(minus(r.total, *r.to_first_token));
    else throw Error(fmt::format("worker {} did not report when its first token came", nodes[w]));
  }
  return out;
}

void print_breakdown_row(const char* phase, const std::vector<parallel::RuntimeStats>& s, double tokens,
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

  cluster::ClusterJob job(*file, o);
  const auto& plan = job.plan();
  const auto& setup = job.stats();
  SamplerParams greedy;
  greedy.temperature = 0;
  const auto ignore = [](TokenId) {};
  job.generate({prompt[0]}, 1, greedy, -1, ignore);
  job.generate(prompt, 1, greedy, -1, ignore);
  if (r.gen > 0) job.generate(prompt, r.gen + 1, greedy, -1, ignore);
  const auto worker_stats = job.finish();
  // The driving worker's own clock: tokens reach the coordinator in bursts,
  // so their arrival times do not tell how long a step took.
  const double prompt_s = phase_stats(worker_stats, o.nodes, kPromptOnly)[0].total_seconds;
  const double decode_s = r.gen > 0 ? phase_stats(worker_stats, o.nodes, kPromptAndDecode)[0].total_seconds : 0;
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
  print_breakdown_row("prompt", phase_stats(worker_stats, o.nodes, kPromptOnly), r.prompt, plan);
  if (r.gen > 0) print_breakdown_row("decode", phase_stats(worker_stats, o.nodes, kPromptAndDecode), r.gen, plan);
  std::printf("(tokens/s and per token: times measured on the first worker, which drives; wire bytes of all "
              "workers)\n");
}

}  // namespace shardlm::cli
