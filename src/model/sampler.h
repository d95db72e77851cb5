// Picks the next token from logits. Greedy when temperature <= 0; otherwise
// logit bias → penalties → top-k → top-p → min-p → temperature → a draw from our own PRNG,
// so a seed gives the same tokens on every platform and standard library.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "model/logprobs.h"
#include "tokenizer/tokenizer.h"

namespace shardlm {

// xoshiro256** seeded through splitmix64.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next();
  double uniform();  // [0, 1) with 53 random bits
 private:
  uint64_t s_[4];
};

// Added to a token's logit before the penalties (OpenAI's logit_bias).
struct TokenBias {
  TokenId id;
  float bias;
  bool operator==(const TokenBias&) const = default;
};

// How many biased tokens a sequence may have.
constexpr size_t kMaxLogitBias = 1024;

struct SamplerParams {
  float temperature = 0.8f;       // <= 0: greedy (ties → lowest id)
  int32_t top_k = 40;             // <= 0: off
  float top_p = 0.95f;            // >= 1: off
  float min_p = 0.05f;            // <= 0: off; keeps p >= min_p · p_max
  float repeat_penalty = 1.0f;    // 1: off; divides positive logits, multiplies negative ones
  float presence_penalty = 0.0f;  // 0: off; subtracted from the logit of every recent token
  float frequency_penalty = 0.0f; // 0: off; subtracted once per occurrence among the recent tokens
  int32_t penalty_window = 64;    // how many recent tokens the penalties look at
  uint64_t seed = 0;
  // < 0: off; 0..kMaxTopLogprobs: report the sampled token's log-probability and
  // this many most likely tokens': log-softmax of the raw logits (model/logprobs.h).
  int32_t logprobs = -1;
  std::vector<TokenBias> logit_bias;  // increasing id, each once, finite
};

// The logit bias and then the penalties of `p` on the logits of the ids in
// [begin, end): the biased ids and those among `recent` (the last
// penalty_window tokens, in any order), each once, in increasing order.
// logit(id) is that id's logit; `seen` is scratch. The one rule every sampler
// (single node, vocabulary slices) applies.
template <class LogitOf>
void apply_penalties(const SamplerParams& p, std::span<const TokenId> recent, std::vector<TokenId>& seen,
                     TokenId begin, TokenId end, LogitOf&& logit) {
  const bool penalised = p.repeat_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  if (!penalised && p.logit_bias.empty()) return;
  seen.clear();
  if (penalised) seen.assign(recent.begin(), recent.end());
  std::sort(seen.begin(), seen.end());
  auto bias = p.logit_bias.begin();
  for (size_t i = 0; i < seen.size() || bias != p.logit_bias.end();) {
    // The next id: the lower of the next recent one and the next biased one.
    const bool from_bias = i == seen.size() || (bias != p.logit_bias.end() && bias->id <= seen[i]);
    const TokenId id = from_bias ? bias->id : seen[i];
    size_t count = 0;
    while (i + count < seen.size() && seen[i + count] == id) ++count;
    i += count;
    const float added = from_bias ? (bias++)->bias : 0.0f;
    if (id < begin || id >= end) continue;
    float& l = logit(id);
    l += added;
    if (count == 0) continue;
    l = l > 0 ? l / p.repeat_penalty : l * p.repeat_penalty;
    l -= p.presence_penalty + float(count) * p.frequency_penalty;
  }
}

class Sampler {
 public:
  Sampler(const SamplerParams& params, int64_t n_vocab);
  // Throws Error when logits.size() != n_vocab. Fills *logprobs when
  // params().logprobs >= 0 and logprobs is not null (otherwise no cost).
  TokenId sample(std::span<const float> logits, SampledLogprobs* logprobs = nullptr);
  // Records a token (prompt or generated) for the penalties.
  void accept(TokenId id);
  const SamplerParams& params() const { return p_; }

 private:
  TokenId pick(std::span<const float> logits);  // temperature > 0
  void rank(std::span<const float> logits);     // cand_: the penalised candidates, best first
  size_t truncate();  // top-p and min-p over the ranked candidates; returns how many stay

  SamplerParams p_;
  int64_t n_vocab_;
  Rng rng_;
  std::vector<TokenLogit> cand_;
  std::vector<TokenId> recent_;   // ring buffer of the last penalty_window tokens
  size_t recent_next_ = 0;
  std::vector<TokenId> seen_;     // scratch
  std::vector<float> probs_;      // scratch
  std::vector<TokenLogit> top_;   // scratch
};

// Index of the largest value; ties go to the lowest index (ops::argmax).
TokenId argmax(std::span<const float> logits);

}  // namespace shardlm
