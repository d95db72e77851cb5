// Log-probabilities reported with a sampled token, defined as vLLM's default:
// the log-softmax of the model's raw logits for that position (before
// penalties, temperature and truncation), so a greedy pick has the largest.
// Built from parts that combine over vocabulary slices: each slice gives its
// log-sum-exp as (max, Σ exp(logit - max)) and its best logits, and
// finish_logprobs() turns the combined parts into the report. One node is the
// case of a single slice, so both paths share every step but the combine.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace shardlm {

constexpr int32_t kMaxTopLogprobs = 20;  // OpenAI's limit for top_logprobs

struct TokenLogprob {
  TokenId id = -1;
  float logprob = 0;
};

struct SampledLogprobs {
  float logprob = 0;               // of the sampled token
  std::vector<TokenLogprob> top;   // most likely first; ties: lowest id first
};

// log Σ exp(logit) over a set of logits, in a form that combines over slices.
struct LogSumExp {
  float max = -std::numeric_limits<float>::infinity();
  double sum = 0;  // Σ exp(logit - max)

  static LogSumExp of(std::span<const float> logits);
  void combine(const LogSumExp& other);
  double value() const;
};

struct TokenLogit {
  TokenId id = -1;  // -1: padding
  float logit = 0;
};

// A logit as candidates are ranked: NaN ranks with -inf, so the order stays a
// strict weak order (sorting relies on that) whatever the model wrote.
inline float rank_of(float logit) { return std::isnan(logit) ? -std::numeric_limits<float>::infinity() : logit; }

// The candidate order everywhere (sampler, top logprobs): higher rank_of
// first, then lower id.
bool ranks_before(const TokenLogit& a, const TokenLogit& b);

// The `n` largest logits of a slice whose first token is `first`, best first
// (ties: lowest id first), into out[0..min(n, size)); the rest of out[0..n) is padding.
void top_logits(std::span<const float> logits, TokenId first, size_t n, TokenLogit* out);

// The report for the picked token's raw logit, from the log-sum-exp over the
// whole vocabulary and candidates for the top list (any order, padding
// allowed, a superset of the `n_top` best).
SampledLogprobs finish_logprobs(const LogSumExp& lse, float picked_logit, std::span<const TokenLogit> candidates,
                                size_t n_top);

}  // namespace shardlm
