// shardlm bench dist: one model on local ranks (forked processes on loopback
// TCP or shared memory), decode tokens/s with a per-token breakdown, bytes on
// the wire, and the planner's prediction next to it.
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>

#include "cli/bench_common.h"
#include "cli/commands.h"
#include "cli/usage.h"
#include "comm/communicator.h"
#include "core/bench_matrix.h"
#include "core/clock.h"
#include "core/matmul.h"
#include "net/socket.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "parallel/distributed_session.h"
#include "parallel/kernel_rates.h"
#include "parallel/sync_cost.h"
#include "parallel/token_costs.h"
#include "parallel/wire_format.h"

namespace shardlm::cli {
namespace {

struct DistBenchOptions {
  std::string model, backend = "tcp", wire_type;
  int tp = 1, pp = 1, threads = 1, seqs = 1, gen = 32, prompt = 8;
  bool ep = false;  // --ep N: tp = N, MoE layers split by whole experts
  int spin_us = -1;  // -1: the wait rule of comm/wait_policy.h
  double bandwidth_gbs = 20;  // for the prediction: this machine's per-rank memory bandwidth
  bool measure_rates = true;  // the prediction from measured kernel rates (else bandwidth alone)
  double balance_margin = parallel::kDefaultBalanceMargin;
  std::optional<int64_t> balance_shift;  // fixed row boundaries (DistributedSessionOptions::balance_shift)
  bool batch_invariant = false;  // DistributedSessionOptions::batch_invariant
  int paired = 0;  // bursts alternated with one rank of all the threads (see paired_bursts)
  parallel::KernelRates rates;  // measured before the ranks fork, so every rank plans alike
  parallel::TokenCosts token_costs;  // likewise
};

using Clock = SteadyClock;
constexpr size_t kRateMatrixBytes = size_t(64) << 20, kMaxRateMatrixBytes = size_t(1) << 30;

// Where a rank's all-reduce time goes: per step, how many all-reduces took
// how long and the ms they add up to, by length; and the context switches.
std::string wait_histogram(const parallel::RankStats& s, double steps) {
  std::string text = "all-reduces per step by length:";
  double lo = 0;
  for (int i = 0; i < parallel::RankStats::kWaitBuckets; ++i) {
    const double hi = i + 1 < parallel::RankStats::kWaitBuckets ? parallel::kWaitBucketEndsUs[i] : 0;
    const std::string range = hi > 0 ? fmt::format("{:.0f}-{:.0f} us", lo, hi) : fmt::format(">{:.0f} us", lo);
    if (s.all_reduce_waits[i] > 0)
      text += fmt::format(" {} {:.2f} ({:.2f} ms);", range, double(s.all_reduce_waits[i]) / steps,
                          s.all_reduce_wait_seconds[i] * 1e3 / steps);
    lo = hi;
  }
  text += fmt::format(" after attention {:.2f} ms, after FFNs {:.2f} ms;", s.attention_all_reduce_seconds * 1e3 / steps,
                      (s.all_reduce_seconds - s.attention_all_reduce_seconds) * 1e3 / steps);
  return text + fmt::format(" context switches per step: {:.1f} voluntary, {:.1f} involuntary",
                            double(s.voluntary_switches) / steps, double(s.involuntary_switches) / steps);
}

void report(const DistBenchOptions& o, const parallel::Plan& plan, const ModelConfig& c,
            const std::vector<parallel::RankStats>& all, double decode_seconds, int64_t decoded) {
  const double tps = double(decoded) / decode_seconds;
  const auto& s0 = all[0];
  const double per_tok = decode_seconds / double(decoded) * double(o.seqs);  // one sequence's step
  // Every rank resets its stats after the warm-up; each is still scaled to
  // rank 0's forward steps (every rank runs every step), which keeps a
  // stage's figures comparable should they ever differ.
  auto share = [&](const parallel::RankStats& s) {
    return s.forward_calls > 0 ? double(s0.forward_calls) / double(s.forward_calls) : 0.0;
  };
  double bytes = 0;
  for (const auto& s : all) bytes += s.bytes_sent * share(s);
  const double steps = double(s0.tokens) / double(o.seqs);  // forward steps per sequence (prefill ≈ 1)
  std::printf("| layout | ranks × threads | seqs | decode tok/s | ms/step | %s | plan tok/s |\n", kBreakdownColumns);
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  const auto b = step_breakdown(s0, steps, bytes / double(s0.tokens), plan.min_wire_bytes_per_token);
  std::printf("| %s %d × pp %d | %d × %d | %d | %.1f | %.2f | %s | %.1f |\n", o.ep ? "ep" : "tp", o.tp, o.pp,
              o.tp * o.pp, o.threads,
              o.seqs, tps, per_tok * 1e3, breakdown_cells(b).c_str(),
              o.seqs >= o.pp ? plan.pipelined_tok_s : plan.single_seq_tok_s);
  std::printf("(breakdown: rank 0, per decode step incl. the prompt's share; model %s; wire %s)\n",
              c.summary().c_str(), parallel::wire_type_name(plan.wire_type).c_str());
  const auto& node = plan.nodes[0];
  std::printf("(plan: rank 0 computes a token in %.2f ms; token costs measured: %.3f ns a value, KV store %.3f ns a "
              "byte, attention %.4f ns; link latency %.1f us)\n",
              plan.costs[0].compute_seconds * 1e3, node.token_costs.vector_ns, node.token_costs.kv_store_ns,
              node.token_costs.attention_ns, node.link_latency_us);
  std::vector<double> compute_ms(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    const double steps_r = share(all[r]) > 0 ? steps / share(all[r]) : steps;
    const auto br = step_breakdown(all[r], steps_r, all[r].bytes_sent * share(all[r]) / double(s0.tokens), 0);
    compute_ms[r] = br.compute_ms;
    // The all-reduces poll, so their CPU time is taken as their wall time
    // (less only where a wait slept or lost its core: then, as with steps
    // of a tiny model whose waits sleep, the difference means nothing).
    const double cpu_ms = (all[r].forward_cpu_seconds - all[r].all_reduce_seconds) * 1e3 / steps_r;
    const std::string cpu = cpu_ms >= 0 ? fmt::format("{:.2f} ms", cpu_ms) : "unknown: the waits slept";
    std::printf("(rank %zu per step: compute %.2f ms (CPU %s), collective %.2f ms, p2p wait %.2f ms, other %.2f ms; "
                "sent %.0f B per token)\n",
                r, br.compute_ms, cpu.c_str(), br.collective_ms, br.p2p_wait_ms, br.other_ms, br.wire_bytes);
    if (all[r].all_reduces > 0) std::printf("(rank %zu %s)\n", r, wait_histogram(all[r], steps_r).c_str());
    if (all[r].rows_sent > 0 || all[r].rows_wait_seconds > 0)
      std::printf("(rank %zu row balance per step: %.0f FFN gate/up and output rows computed for a neighbour (all "
                  "layers), %.3f ms waiting for rows a neighbour computed)\n",
                  r, all[r].rows_sent / steps_r, all[r].rows_wait_seconds * 1e3 / steps_r);
  }
  // Tensor-parallel ranks meet in every all-reduce, so the faster ones wait
  // out the difference (expert parallel: the experts each step routed to them).
  for (int st = 0; st < plan.pp && plan.tp > 1; ++st) {
    const auto first = compute_ms.begin() + st * plan.tp, last = first + plan.tp;
    const double hi = *std::max_element(first, last), lo = *std::min_element(first, last);
    std::printf("(stage %d imbalance: compute per step %.2f ms on the busiest rank, %.2f ms on the idlest, +%.0f%%; "
                "the waits of single steps show in each rank's collective time)\n",
                st, hi, lo, lo > 0 ? (hi / lo - 1) * 100 : 0.0);
    const auto& s = all[size_t(plan.rank_of(st, 0))];
    if (s.expert_pairs_mean > 0)
      std::printf("(stage %d routing per step, summed over its MoE layers: %.1f (token, expert) pairs on the busiest rank of each layer, %.1f on the mean rank: +%.0f%%; the planner expects +%.0f%% at %lld token(s) per step)\n",
                  st, s.expert_pairs_busiest / steps, s.expert_pairs_mean / steps,
                  (s.expert_pairs_busiest / s.expert_pairs_mean - 1) * 100, (plan.expert_imbalance_step - 1) * 100,
                  static_cast<long long>(plan.step_tokens));
  }
}

// Greedy: every prompt in one step each, then `gen` - 1 steps with an entry
// per sequence. Returns the seconds of those decode steps.
double decode_steps(parallel::DistributedSession& s, const std::vector<std::vector<TokenId>>& prompts, int gen) {
  SamplerParams greedy;
  greedy.temperature = 0;
  std::vector<TokenId> next(prompts.size());
  Batch b;
  for (size_t i = 0; i < prompts.size(); ++i) {
    s.add(int32_t(i), greedy, {});
    b.clear();
    for (size_t t = 0; t < prompts[i].size(); ++t) b.add(int32_t(i), int32_t(t), prompts[i][t], t + 1 == prompts[i].size());
    next[i] = s.step(b).at(0).token;
  }
  const auto t0 = Clock::now();
  for (int k = 1; k < gen; ++k) {
    b.clear();
    for (size_t i = 0; i < prompts.size(); ++i) b.add(int32_t(i), int32_t(prompts[i].size()) + k - 1, next[i], true);
    for (const auto& t : s.step(b)) next[size_t(t.slot)] = t.token;
  }
  const double seconds = seconds_since(t0);
  for (size_t i = 0; i < prompts.size(); ++i) s.free(int32_t(i));
  return seconds;
}

// This host's speed swings by a third for seconds at a time, so two layouts
// timed in separate runs are compared across different spells. Here rank 0
// alternates bursts of `gen` tokens of the layout (`layout`) with bursts of
// one rank holding the whole model on all the layout's threads (`alone`),
// the others idle (their waits sleep after the spin): each pair of bursts
// meets about the same spell.
struct PairedBursts {
  double layout_seconds = 0;  // decode, summed over the bursts
  std::string summary;        // a line for the report
};
PairedBursts paired_bursts(parallel::DistributedSession& layout, parallel::DistributedSession& alone,
                           const std::vector<std::vector<TokenId>>& prompts, const DistBenchOptions& o,
                           int alone_threads) {
  const double tokens = double(o.seqs) * double(o.gen - 1);
  std::vector<double> ratios;
  double layout_seconds = 0, alone_seconds = 0;
  for (int i = 0; i < o.paired; ++i) {
    // Each goes first in every other pair: a spell that begins mid-pair favours neither.
    double a = 0, b = 0;
    if (i % 2) b = decode_steps(alone, prompts, o.gen);
    a = decode_steps(layout, prompts, o.gen);
    if (i % 2 == 0) b = decode_steps(alone, prompts, o.gen);
    layout_seconds += a;
    alone_seconds += b;
    ratios.push_back(b / a);
  }
  std::vector<double> sorted = ratios;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  std::string each;
  for (double r : ratios) each += fmt::format(" {:.2f}", r);
  const std::string layout_name = fmt::format("{} {} × pp {}", o.ep ? "ep" : "tp", o.tp, o.pp);
  return {layout_seconds,
          fmt::format("(paired: {} bursts of {} tokens alternated with 1 rank × {} threads in rank 0's process: {} "
                      "{:.1f} tok/s, 1 × {} {:.1f} tok/s; ratio per pair median {:.3f}, quartiles {:.3f}-{:.3f}, of "
                      "the sums {:.3f}; per pair:{})",
                      o.paired, o.gen, alone_threads, layout_name, tokens * o.paired / layout_seconds, alone_threads,
                      tokens * o.paired / alone_seconds, median, sorted[n / 4], sorted[n * 3 / 4],
                      alone_seconds / layout_seconds, each)};
}

// The link latency this host's tensor-parallel groups see (parallel/sync_cost.h):
// each all-reduce of a token's activations after the rank's share of an
// attention block or an FFN (matrices of the model's main type), two decode
// steps' worth, less the bytes the planner already charges, per latency
// step. Collective over `world`; 0 without tp.
double measured_link_latency_us(comm::Communicator& world, const DistBenchOptions& o, const gguf::File& file,
                                const parallel::Plan& plan, const parallel::NodeSpec& node) {
  if (o.tp <= 1) return 0;
  auto group = world.split(world.rank() / o.tp, world.rank() % o.tp);
  const ModelConfig c = ModelConfig::from_gguf(file);
  // A dense FFN's type, else (mixture of experts) the attention output's: the model's main matrices.
  const auto* ffn_up = file.find_tensor("blk.0.ffn_up.weight");
  const DType type = (ffn_up ? *ffn_up : file.require_tensor("blk.0.attn_output.weight")).type;
  const int64_t kv = c.n_head_kv * c.head_dim_k;
  const BenchMatrix attention = make_model_bench_matrix(type, (2 * c.n_embd + 2 * kv) / o.tp, c.n_embd);
  const BenchMatrix ffn = make_model_bench_matrix(type, 3 * c.n_ff / o.tp, c.n_embd);
  std::vector<float> x(size_t(c.n_embd), 0.5f), y(size_t(3 * c.n_ff));
  const int rounds = int(4 * c.n_layer / o.pp);  // two decode steps' all-reduces
  const double seconds = parallel::measure_all_reduce_seconds(
      *group, plan.wire_type, size_t(c.n_embd), rounds,
      [&](int i) { matmul((i % 2 ? ffn : attention).view, x.data(), 1, y.data(), nullptr); });
  parallel::NodeSpec no_latency = node;
  no_latency.link_latency_us = 0;
  const double bytes_seconds = parallel::all_reduce_seconds(o.tp, size_t(c.n_embd), plan.wire_type, no_latency);
  return std::max(0.0, seconds - bytes_seconds) / parallel::all_reduce_steps(o.tp) * 1e6;
}

// One rank: connect, run the session, rank 0 prints. Returns the exit code.
int rank_main(const DistBenchOptions& o, int rank, int listen_fd, uint16_t port, const std::string& shm_name) {
  try {
    comm::ConnectOptions c;
    c.backend = o.backend;
    c.rank = rank;
    c.size = o.tp * o.pp;
    c.coordinator = o.backend == "tcp" ? fmt::format("127.0.0.1:{}", port) : shm_name;
    c.listen_fd = rank == 0 ? listen_fd : -1;
    c.token = "bench-dist";
    if (o.spin_us >= 0) c.timeouts.spin = std::chrono::microseconds(o.spin_us);
    auto world = comm::Communicator::connect(c);
    auto file = gguf::File::open(o.model);
    parallel::NodeSpec node = parallel::default_node("127.0.0.1");
    node.memory_bandwidth_gbs = o.bandwidth_gbs;  // only the prediction reads it
    node.kernel_rates = o.rates;
    node.token_costs = o.token_costs;
    std::optional<DType> wire;
    if (!o.wire_type.empty()) wire = parallel::wire_type_from_name(o.wire_type);
    const int64_t n_ctx = o.prompt + o.gen + 1;
    parallel::Plan plan = parallel::uniform_plan(*file, o.tp, o.pp, {}, node, o.seqs, wire, o.ep, n_ctx, o.balance_margin);
    if (o.tp > 1 && o.measure_rates) {  // the measured link in place of default_node's assumed one
      node.link_latency_us = measured_link_latency_us(*world, o, *file, plan, node);
      plan = parallel::uniform_plan(*file, o.tp, o.pp, {}, node, o.seqs, wire, o.ep, n_ctx, o.balance_margin);
    }
    parallel::DistributedSessionOptions ro;
    ro.n_ctx = n_ctx;
    ro.n_seq = o.seqs;
    ro.n_batch = std::max(o.prompt, o.seqs);
    ro.threads = o.threads;
    ro.balance_shift = o.balance_shift;
    ro.batch_invariant = o.batch_invariant;
    // Every rank takes part in the split; rank 0 alone uses its part.
    std::shared_ptr<comm::Communicator> alone_world = o.paired > 0 ? world->split(rank, 0) : nullptr;
    parallel::DistributedSession s(world, plan, *file, ro);
    std::unique_ptr<parallel::DistributedSession> alone;
    const int alone_threads = o.tp * o.pp * o.threads;
    if (rank == 0 && alone_world) {
      parallel::DistributedSessionOptions one = ro;
      one.threads = alone_threads;
      one.balance_shift.reset();
      alone = std::make_unique<parallel::DistributedSession>(
          alone_world, parallel::uniform_plan(*file, 1, 1, {}, node, o.seqs, {}, false, n_ctx, 0), *file, one);
    }
    double decode_seconds = 0;
    int64_t decoded = 0;
    std::string paired_summary;
    if (rank == 0) {
      std::vector<std::vector<TokenId>> prompts;
      for (int i = 0; i < o.seqs; ++i) {
        std::vector<TokenId> p;
        for (int t = 0; t < o.prompt; ++t) p.push_back(TokenId((t * 31 + i * 7 + 1) % s.model().config().n_vocab));
        prompts.push_back(p);
      }
      decode_steps(s, prompts, 4);  // warm-up: page in the weights
      if (alone) decode_steps(*alone, prompts, 4);
      s.mark();  // every rank's stats start after the warm-up
      s.reset_stats();
      if (alone) {
        const PairedBursts p = paired_bursts(s, *alone, prompts, o, alone_threads);
        decode_seconds = p.layout_seconds;
        paired_summary = p.summary;
      } else {
        decode_seconds = decode_steps(s, prompts, o.gen);
      }
      decoded = int64_t(o.seqs) * (o.gen - 1) * std::max(1, o.paired);
      s.shutdown();
    } else {
      while (s.serve()) s.reset_stats();
    }
    std::vector<parallel::RankStats> all(size_t(world->size()));
    parallel::RankStats mine = s.stats();
    world->all_gather(&mine, all.data(), sizeof mine);
    if (rank == 0) {
      report(o, plan, s.model().config(), all, decode_seconds, decoded);
      if (!paired_summary.empty()) std::printf("%s\n", paired_summary.c_str());
    }
    std::fflush(stdout);  // the rank leaves with _exit
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shardlm: error: rank %d: %s\n", rank, e.what());
    std::fflush(nullptr);
    return 1;
  }
}

void bench_dist(DistBenchOptions o) {
  if (!o.wire_type.empty()) (void)parallel::wire_type_from_name(o.wire_type);
  if (o.tp < 1 || o.pp < 1 || o.tp * o.pp > 16) throw Error("bench dist: need 1 ≤ tp × pp ≤ 16");
  if (o.paired > 0 && o.tp * o.pp == 1) throw UsageError("--paired: the layout has one rank; there is nothing to pair it with");
  if (o.backend != "tcp" && o.backend != "shm") throw Error(fmt::format("--backend: '{}' is not tcp or shm", o.backend));
  {
    auto f = gguf::File::open(o.model);
    // Shape errors before forking; the plan also says what each rank streams.
    const parallel::Plan shape =
        parallel::uniform_plan(*f, o.tp, o.pp, {}, parallel::default_node("127.0.0.1"), 1, {}, o.ep);
    if (o.measure_rates) {
      std::unique_ptr<ThreadPool> pool;
      if (o.threads > 1) pool = std::make_unique<ThreadPool>(o.threads);
      // The ranks that compute at the same time on this one host: a stage's
      // tp ranks, and with pipelined micro-batches (seqs >= pp) every stage's
      // (measured as that many measurers streaming together). The first and
      // last micro-batch of a step run with fewer stages busy, so for pp this
      // errs a little slow; solo rates erred 1.35x fast (docs/bench/plan6.md).
      const int at_once = o.tp * (o.pp > 1 && o.seqs >= o.pp ? o.pp : 1);
      // Each measurer streams as much as a rank reads a token: twice the last
      // level cache measured the 1B Q4_0's one-token rate of two ranks at
      // once 1.3x, its four-token rate 1.2x, faster than their own shares of
      // the model stream (docs/BENCHMARKS.md, thirty-fifth session).
      int64_t read = 0;
      for (const parallel::RankCost& k : shape.costs) read += k.bytes_per_token;
      const size_t rank_bytes = size_t(read) / shape.costs.size();
      o.rates = parallel::measure_kernel_rates(parallel::matmul_weight_types(*f), pool.get(),
                                                std::clamp(rank_bytes, parallel::streamed_matrix_bytes(kRateMatrixBytes),
                                                           kMaxRateMatrixBytes),
                                                at_once, o.tp);
      o.token_costs = parallel::measure_token_costs();
    }
  }
  net::Fd listener = net::listen_on(net::HostPort{"127.0.0.1", 0});
  const uint16_t port = net::local_port(listener.get());
  const std::string shm_name = fmt::format("shardlm-bench-{}", getpid());
  std::vector<pid_t> pids;
  std::fflush(nullptr);
  for (int r = 0; r < o.tp * o.pp; ++r) {
    const pid_t pid = fork();
    if (pid < 0) throw Error("bench dist: fork failed");
    if (pid == 0) _exit(rank_main(o, r, listener.get(), port, shm_name));
    pids.push_back(pid);
  }
  listener.reset();
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  if (failed) throw Error(fmt::format("bench dist: {} rank(s) failed", failed));
}

}  // namespace

void add_bench_dist(CLI::App& bench) {
  auto o = std::make_shared<DistBenchOptions>();
  auto* cmd = bench.add_subcommand("dist", "decode tok/s of one model over local ranks (tensor/pipeline parallel)");
  cmd->add_option("-m,--model", o->model, "GGUF model")->required();
  cmd->add_option("--tp", o->tp, "tensor-parallel ranks per stage")->capture_default_str()->check(integer_in(1, 16));
  cmd->add_option_function<int>(
         "--ep",
         [o](int n) {
           o->tp = n;
           o->ep = true;
         },
         "mixture-of-experts models: tensor-parallel ranks holding whole experts (instead of --tp's expert rows)")
      ->check(integer_in(1, 16))
      ->excludes("--tp");
  cmd->add_option("--pp", o->pp, "pipeline stages")->capture_default_str()->check(integer_in(1, 16));
  cmd->add_option("-t,--threads", o->threads, "threads per rank")->capture_default_str()->check(integer_in(1, 1024));
  cmd->add_option("--seqs", o->seqs, "sequences decoded together")->capture_default_str()->check(integer_in(1, 64));
  cmd->add_option("--gen", o->gen, "tokens per sequence")->capture_default_str()->check(integer_in(2, 4096));
  cmd->add_option("--prompt", o->prompt, "prompt tokens")->capture_default_str()->check(integer_in(1, 4096));
  cmd->add_option("--backend", o->backend, "tcp|shm")->capture_default_str()->check(CLI::IsMember({"tcp", "shm"}));
  cmd->add_option("--bandwidth", o->bandwidth_gbs, "GB/s per rank for the plan's prediction where no rate is measured")
      ->capture_default_str()
      ->check(finite_in(0.001, 1e5));
  cmd->add_option("--wire-type", o->wire_type, "activations on the wire: f32|f16|bf16|q8_0; default: the planner's")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0"}));
  cmd->add_option("--spin-us", o->spin_us, "ranks busy-poll this long before sleeping in a wait (-1: the load rule)")
      ->capture_default_str()
      ->check(integer_in(-1, 1000000));
  cmd->add_flag("!--no-kernel-rates", o->measure_rates, "predict from --bandwidth alone (no kernel measurement)");
  cmd->add_option("--balance-margin", o->balance_margin,
                  "share of each tp neighbour's FFN gate/up and output rows a rank also holds, to compute for it "
                  "when it is slower (0: none)")
      ->capture_default_str()
      ->check(finite_in(0, 0.5));
  cmd->add_option("--balance-shift", o->balance_shift,
                  "rows every FFN and output boundary moves towards the rank after it, fixed (default: by measured "
                  "speed)")
      ->check(integer_in(-1000000, 1000000));
  cmd->add_option("--paired", o->paired,
                  "alternate N bursts of --gen tokens with one rank on all the layout's threads, in rank 0's process, "
                  "and print their ratio per pair (this host's speed swings between separate runs)")
      ->check(integer_in(0, 10000));
  cmd->add_flag("--batch-invariant", o->batch_invariant,
                "attend single tokens in the blocked kernels' sum order, as `serve --batch-invariant` does");
  cmd->callback([o] { bench_dist(*o); });
}

}  // namespace shardlm::cli
