// Sampling when the logits are split by vocabulary over the tensor-parallel
// ranks of the last stage. Each rank applies the penalties to its slice and
// keeps only its best candidates (greedy: 1, top-k: k); the ranks exchange
// those few (id, logit) pairs and every rank runs the same Sampler, with the
// same seed, over the merged list sorted by id. That gives the token the
// single-node Sampler would pick from the full logits (the global top-k is a
// subset of the union of local top-k), and every rank agrees on it.
//
// Log-probabilities (SamplerParams::logprobs) cost a second exchange, only
// for the slots that ask: each rank sends its slice's log-sum-exp part, its
// best raw logits and, from the rank that holds it, the picked token's raw
// logit (LogprobPart); every rank combines them in rank order. The top list
// and the picked logit are the single node's bits; the log-sum-exp combine
// rounds differently, so logprobs match one node to |Δ| ≤ 1e-4 (tested).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/plan.h"
#include "model/sampler.h"

namespace shardlm::parallel {

struct Candidate {
  int32_t id = -1;  // -1: padding
  float logit = 0;
};

// One rank's part of a sampled token's log-probabilities, fixed size so the
// ranks exchange it as bytes.
struct LogprobPart {
  double sum_exp = 0;     // LogSumExp of the slice
  float max = 0;
  float picked_logit = 0; // the sampled token's raw logit when this slice holds it
  TokenLogit top[kMaxTopLogprobs];  // the slice's best raw logits, padded with id -1
};

class ShardedSampler {
 public:
  // `slices`: every rank's vocabulary rows, in rank order; `mine`: this rank.
  ShardedSampler(const SamplerParams& params, std::vector<Range> slices, int mine);

  // Candidates each rank contributes per sampled position (the same on all ranks).
  size_t per_rank() const { return per_rank_; }
  // This rank's candidates from its slice of the logits, padded to per_rank().
  void local_candidates(std::span<const float> slice_logits, Candidate* out);
  // The token, from every rank's candidates (ranks × per_rank(), rank order).
  TokenId choose(std::span<const Candidate> gathered);
  void accept(TokenId id);  // a prompt or generated token, for the penalties

  bool wants_logprobs() const { return params_.logprobs >= 0; }
  // This rank's part for `picked` (what choose() returned) from the same slice logits.
  LogprobPart local_logprobs(std::span<const float> slice_logits, TokenId picked) const;
  // The log-probabilities from every rank's part (rank order).
  SampledLogprobs merge_logprobs(std::span<const LogprobPart> parts, TokenId picked) const;

 private:
  SamplerParams params_;
  std::vector<Range> slices_;
  int mine_;
  size_t per_rank_ = 1;
  std::unique_ptr<Sampler> chooser_;  // penalties off: they were applied locally
  std::vector<TokenId> recent_;       // the last penalty_window tokens, oldest first
  std::vector<TokenId> seen_;         // scratch: recent_ sorted
  std::vector<Candidate> scratch_;
  std::vector<TokenLogit> top_;       // scratch: this slice's top-k
  std::vector<float> merged_logits_;
};

}  // namespace shardlm::parallel
