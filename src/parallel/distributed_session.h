// One model run by tp × pp ranks (parallel/planner.h): every rank builds its
// slice of the Model from its own mapped copy of the file, tensor-parallel
// partial sums meet in all-reduces inside each stage, hidden states go stage
// to stage by send/recv, and the last stage samples with the vocabulary split
// (parallel/sharded_sampler.h), so only token ids travel back (with their
// log-probabilities for the slots that ask).
//
// The interface is a step-level engine (the shape of serve/engine.h): rank 0
// adds and frees sequences in KV slots and runs steps of entries from any
// number of them; each step is broadcast to every rank as one StepMessage
// (parallel/step_message.h) and every rank runs it. Within a step the first
// stage cuts the entries into up to pp micro-batches along sequences and
// sends each on as soon as it is computed, so stage i works on micro-batch
// k+1 while stage i+1 works on k; the last stage sends each micro-batch's
// sampled tokens back to the first stage (a few bytes). The bubble is at
// step boundaries: a step of m micro-batches takes m + pp - 1 stage times.
#pragma once

#include <cstdint>
#include <span>
#include <memory>
#include <optional>
#include <vector>

#include "comm/communicator.h"
#include "core/clock.h"
#include "model/model.h"
#include "model/sampler.h"
#include "parallel/planner.h"
#include "parallel/row_balance.h"
#include "parallel/sharded_sampler.h"
#include "parallel/step_message.h"
#include "parallel/wire_all_reduce.h"

namespace shardlm::parallel {

struct DistributedSessionOptions {
  int64_t n_ctx = 512;    // positions per sequence
  int64_t n_seq = 1;      // KV slots: sequences live at once
  int64_t n_batch = 256;  // most entries in one step
  DType kv_type = DType::F32;
  int threads = 1;        // compute threads of this rank
  bool commit_kv_cache = false;  // this rank's KV cache resident from the start (ModelOptions)
  bool time_kernels_at_load = false;  // every kernel choice timed at load (ModelOptions)
  bool batch_invariant = false;  // ModelOptions::batch_invariant
  // Dense FFN and output rows computed for tp neighbours (parallel/row_balance.h): by
  // the measured speeds when unset; else every boundary moved by this many
  // rows towards the rank after it (negative: before), for good (tests and
  // benchmarks). Needs held margins in the plan (PlanRequest::balance_margin).
  std::optional<int64_t> balance_shift;
};

// Where this rank's time went, summed since construction or reset_stats().
struct RankStats {
  double forward_seconds = 0;     // inside Model::forward, all-reduces included
  double forward_cpu_seconds = 0; // CPU time of this process (all its threads) in the same span
  double collective_seconds = 0;  // all-reduces and candidate exchanges
  double all_reduce_seconds = 0;  // the all-reduces alone (they run inside forward)
  double p2p_wait_seconds = 0;    // waiting for hidden states or tokens
  // Rows of column-parallel products (dense FFN gate/up, output) computed
  // for tp neighbours, Σ over layers and forwards, and the time spent
  // waiting for those a neighbour computed (inside forward).
  double rows_sent = 0;
  double rows_wait_seconds = 0;
  double total_seconds = 0;       // inside steps
  int64_t all_reduces = 0;
  int64_t forward_calls = 0;
  int64_t tokens = 0;             // generated tokens (all sequences)
  double bytes_sent = 0;          // this rank's payload on the wire (all-reduce by algorithm)
  // Σ over forward steps and MoE layers of the (token, expert) pairs routed to
  // the busiest rank of this rank's tensor-parallel group, and to its mean
  // rank: their ratio is the group's per-step imbalance (whole experts only;
  // a row split gives every rank every pair).
  double expert_pairs_busiest = 0, expert_pairs_mean = 0;
  // The all-reduces by how long each took (waiting for the peers included):
  // bucket i holds those under kWaitBucketEndsUs[i] µs, the last the rest.
  // A few long ones are a rank losing its core or sleeping through a
  // wake-up; many middling ones are a steady compute skew.
  static constexpr int kWaitBuckets = 7;
  int64_t all_reduce_waits[kWaitBuckets] = {};
  double all_reduce_wait_seconds[kWaitBuckets] = {};
  // Of all_reduce_seconds, the all-reduces that end an attention block (the
  // rest end FFNs): which segments the ranks finish apart.
  double attention_all_reduce_seconds = 0;
  // Context switches of this process inside forward (getrusage): voluntary
  // (it slept, e.g. blocked in a wait) and involuntary (the OS took its core).
  int64_t voluntary_switches = 0, involuntary_switches = 0;
};
inline constexpr double kWaitBucketEndsUs[RankStats::kWaitBuckets - 1] = {16, 64, 256, 1000, 4000, 16000};

// CPU time of this process so far (CLOCK_PROCESS_CPUTIME_ID), in seconds.
double process_cpu_seconds();
// This process's context switches so far (getrusage).
struct ContextSwitches {
  int64_t voluntary = 0, involuntary = 0;
};
ContextSwitches context_switches();

class DistributedSession {
 public:
  // Collective over `world`: every rank constructs its session with the same plan.
  DistributedSession(std::shared_ptr<comm::Communicator> world, const Plan& plan, const gguf::File& file,
                     DistributedSessionOptions options);
  ~DistributedSession();

  // Rank 0: the engine. add()/free() go out with the next step. step()
  // returns one token per entry that wants one, in entry order. Throws Error
  // for a request that does not fit (before any other rank is involved) and
  // for any peer failure.
  void add(int32_t slot, const SamplerParams& params, std::span<const TokenId> kept_prefix);
  void free(int32_t slot);
  std::vector<SlotToken> step(const Batch& entries);
  // Rank 0: runs a step message made elsewhere (the coordinator's, checked by decode()).
  std::vector<SlotToken> run(const StepMessage& message);
  // Rank 0: the full logits after the prompt in slot 0, which must be free
  // (gathered on purpose: tests, debugging). Slot 0 is free again after.
  std::vector<float> prompt_logits(const std::vector<TokenId>& prompt);
  // Rank 0: a stats boundary on every rank (the followers' serve() returns true).
  void mark();
  // Rank 0: releases the followers' serve() for good.
  void shutdown();
  // Ranks other than 0: run rank 0's steps; true at a mark(), false at shutdown().
  bool serve();

  int64_t n_slots() const { return opt_.n_seq; }
  int64_t n_ctx() const { return opt_.n_ctx; }
  int64_t max_step_entries() const { return opt_.n_batch; }
  int64_t n_vocab() const { return model_->config().n_vocab; }
  const Model& model() const { return *model_; }
  const Plan& plan() const { return plan_; }
  int rank() const { return rank_; }
  const RankStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 private:
  void broadcast(const StepMessage* message, StepMessage& received);
  std::vector<SlotToken> execute(const StepMessage& m, std::vector<float>* logits_out);
  void apply(const SeqOp& op);
  // Runs a micro-batch on this stage and hands it on; on the last stage
  // returns the sampled tokens or, for a logits step, gathers the logits.
  std::vector<SlotToken> run_batch(StepKind kind, const Batch& batch, const float* hidden,
                                   std::vector<float>* logits_out);
  std::vector<SlotToken> sample(const Batch& batch);
  void add_logprobs(std::vector<SlotToken>& tokens);
  void gather_logits(std::vector<float>* logits_out);
  void send_stage(const Batch& batch);
  void recv_stage(const Batch& expected);
  void send_tokens(const std::vector<SlotToken>& tokens);
  std::vector<SlotToken> recv_tokens(size_t expected);
  void all_reduce_hook(float* data, size_t count);
  // distributed_session_balance.cpp: the rows this rank computes for its
  // neighbours, and the window of timings after which they change.
  void install_row_hooks(ModelOptions& mo, const ModelConfig& c);
  void check_stage_rows_agree(const ModelConfig& c);
  void note_balance_window(int64_t n_tokens, double ffn_seconds, double output_seconds);
  void note_expert_balance();

  std::shared_ptr<comm::Communicator> world_, stage_;
  Plan plan_;
  DistributedSessionOptions opt_;
  int rank_, stage_index_, tp_index_;
  bool last_stage_ = false;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<StepBuilder> builder_;                   // rank 0
  std::vector<bool> live_;                                 // every rank: slots added and not freed
  std::vector<std::unique_ptr<ShardedSampler>> samplers_;  // last stage: one per live slot
  std::vector<uint8_t> send_buf_, recv_buf_, message_buf_;
  std::vector<float> hidden_in_;
  WireAllReduce wire_all_reduce_;
  // By SharedRows (dense FFN, output): the stage's boundaries where its
  // ranks hold margins, this rank's window of timings, its waits for rows.
  struct RowBalance {
    std::unique_ptr<RowBalancer> balancer;
    BalanceWindow window;
    double wait_seconds = 0;
  };
  RowBalance balance_[2];
  std::vector<BalanceWindow> balance_windows_;
  // Within a forward: all-reduces so far, when the last one ended, and the
  // seconds from each attention all-reduce to the next (the FFNs).
  int64_t all_reduces_in_forward_ = 0;
  SteadyClock::time_point segment_begin_;
  double ffn_segment_seconds_ = 0;
  std::vector<Candidate> cand_mine_, cand_all_;
  std::vector<LogprobPart> lp_mine_, lp_all_;
  RankStats stats_;
};

}  // namespace shardlm::parallel
