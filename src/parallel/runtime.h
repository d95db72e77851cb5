// One model run by tp × pp ranks (parallel/planner.h): every rank builds its
// slice of the Model from its own mapped copy of the file, tensor-parallel
// partial sums meet in all-reduces inside each stage, hidden states go stage
// to stage by send/recv, and the last stage samples with the vocabulary split
// (parallel/sharded_sampler.h). Rank 0 drives: generate() broadcasts the
// request, every other rank follows it in serve().
//
// Schedule: the first stage feeds prompts in chunks of n_batch tokens
// (chunked prefill), then decodes; with several sequences it keeps up to pp
// micro-batches in flight, so stage i works on micro-batch k+1 while stage
// i+1 works on k. Later stages are pure dataflow: they run whatever arrives
// and pass it on until the first stage says the request is over. The last
// stage sends the sampled tokens back to the first stage (a few bytes).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "model/model.h"
#include "model/sampler.h"
#include "parallel/planner.h"
#include "parallel/sharded_sampler.h"
#include "parallel/wire_all_reduce.h"

namespace shardlm::parallel {

struct RuntimeOptions {
  int64_t n_ctx = 512;    // positions per sequence
  int64_t n_seq = 1;      // most sequences of one request
  int64_t n_batch = 256;  // prefill chunk and largest forward batch
  DType kv_type = DType::F32;
  int threads = 1;        // compute threads of this rank
};

struct GenerateRequest {
  std::vector<std::vector<TokenId>> prompts;  // one sequence each
  int32_t n_predict = 16;                     // tokens to generate per sequence
  SamplerParams sampling;                     // sequence i uses seed + i
  TokenId eos = -1;                           // ends a sequence early (-1: never)
};

// Where this rank's time went, summed since construction or reset_stats().
struct RuntimeStats {
  double forward_seconds = 0;     // inside Model::forward, all-reduces included
  double forward_cpu_seconds = 0; // CPU time of this process (all its threads) in the same span
  double all_reduce_cpu_seconds = 0;  // its part inside the all-reduces (polling counts)
  double collective_seconds = 0;  // all-reduces and candidate exchanges
  double all_reduce_seconds = 0;  // the all-reduces alone (they run inside forward)
  double p2p_wait_seconds = 0;    // waiting for hidden states or tokens
  double total_seconds = 0;       // inside generate()/serve() requests
  int64_t all_reduces = 0;
  int64_t forward_calls = 0;
  int64_t tokens = 0;             // generated tokens (all sequences)
  double bytes_sent = 0;          // this rank's payload on the wire (all-reduce by algorithm)
};

// CPU time of this process so far (CLOCK_PROCESS_CPUTIME_ID), in seconds.
double process_cpu_seconds();

class DistributedSession {
 public:
  // Collective over `world`: every rank constructs its session with the same plan.
  DistributedSession(std::shared_ptr<comm::Communicator> world, const Plan& plan, const gguf::File& file,
                     RuntimeOptions options);
  ~DistributedSession();

  // Rank 0. on_token(seq, token) is called for every generated token in order.
  // Throws Error for a request that does not fit the options (before any
  // other rank is involved) and for any peer failure.
  void generate(const GenerateRequest& request, const std::function<void(int seq, TokenId token)>& on_token);
  // Rank 0: the full logits after the prompt (gathered on purpose: tests, debugging).
  std::vector<float> prompt_logits(const std::vector<TokenId>& prompt);
  // Rank 0: releases the followers' serve().
  void shutdown();
  // Ranks other than 0: follows rank 0's requests until shutdown().
  void serve();

  const Model& model() const { return *model_; }
  const Plan& plan() const { return plan_; }
  int rank() const { return rank_; }
  const RuntimeStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 private:
  struct Request;
  struct Seq;
  using Tokens = std::vector<std::pair<int32_t, TokenId>>;
  void broadcast_request(Request& r);
  void run(const Request& r, const std::function<void(int, TokenId)>& on_token, std::vector<float>* logits_out);
  void drive(const Request& r, const std::function<void(int, TokenId)>& on_token, std::vector<float>* logits_out);
  void follow(const Request& r, std::vector<float>* logits_out);
  // Runs a batch on this stage and hands it on; on the last stage returns the
  // sampled (seq, token) pairs or, for a logits request, gathers the logits.
  Tokens run_batch(const Request& r, const Batch& batch, const float* hidden, std::vector<float>* logits_out);
  Tokens sample(const Batch& batch);
  void gather_logits(std::vector<float>* logits_out);
  void send_stage(int kind, const Batch* batch);
  bool recv_stage(Batch& batch);  // false: end of request
  void send_tokens(const Tokens& tokens);
  Tokens recv_tokens();
  void all_reduce_hook(float* data, size_t count);

  std::shared_ptr<comm::Communicator> world_, stage_;
  Plan plan_;
  RuntimeOptions opt_;
  int rank_, stage_index_, tp_index_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<Model> model_;
  std::vector<std::unique_ptr<ShardedSampler>> samplers_;  // last stage: one per sequence
  std::vector<uint8_t> send_buf_, recv_buf_;
  std::vector<float> hidden_in_;
  WireAllReduce wire_all_reduce_;
  std::vector<Candidate> cand_mine_, cand_all_;
  RuntimeStats stats_;
};

}  // namespace shardlm::parallel
