#include "parallel/sharded_sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "model/penalised_logits.h"

namespace shardlm::parallel {

ShardedSampler::ShardedSampler(const SamplerParams& params, std::vector<Range> slices, int mine)
    : params_(params), slices_(std::move(slices)), mine_(mine) {
  size_t widest = 0, merged = 0;
  for (const Range& r : slices_) widest = std::max(widest, size_t(r.size()));
  if (params_.temperature <= 0)
    per_rank_ = 1;
  else if (params_.top_k > 0)
    per_rank_ = std::min(widest, size_t(params_.top_k));
  else
    per_rank_ = widest;
  for (const Range& r : slices_) merged += std::min(per_rank_, size_t(r.size()));
  SamplerParams chooser = params_;
  chooser.repeat_penalty = 1.0f;
  chooser.presence_penalty = 0.0f;
  chooser.frequency_penalty = 0.0f;
  chooser.logit_bias.clear();  // the chooser's logits are candidates, not ids; each slice biased its own
  chooser_ = std::make_unique<Sampler>(chooser, int64_t(merged));
  merged_logits_.resize(merged);
}

void ShardedSampler::local_candidates(std::span<const float> logits, Candidate* out) {
  const Range mine = slices_[size_t(mine_)];
  if (int64_t(logits.size()) != mine.size())
    throw Error(fmt::format("sampler: {} logits for a vocabulary slice of {}", logits.size(), mine.size()));
  // The single node's choice rules (greedy, or its top-k order), straight
  // from the slice's logits.
  const PenalisedLogits penalised(params_, recent_, seen_, TokenId(mine.begin), logits);
  if (per_rank_ == 1) {
    if (logits.empty()) {
      out[0] = Candidate{};
      return;
    }
    const TokenLogit best = penalised.best();
    out[0] = {best.id, best.logit};
    return;
  }
  penalised.top(per_rank_, top_);
  for (size_t i = 0; i < per_rank_; ++i) out[i] = i < top_.size() ? Candidate{top_[i].id, top_[i].logit} : Candidate{};
}

TokenId ShardedSampler::choose(std::span<const Candidate> gathered) {
  scratch_.clear();
  for (const Candidate& c : gathered)
    if (c.id >= 0) scratch_.push_back(c);
  if (scratch_.size() != merged_logits_.size())
    throw Error(fmt::format("sampler: {} candidates gathered, expected {}", scratch_.size(), merged_logits_.size()));
  // Id order makes the chooser's ties (lowest index) the single node's (lowest id).
  std::sort(scratch_.begin(), scratch_.end(), [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
  for (size_t i = 0; i < scratch_.size(); ++i) merged_logits_[i] = scratch_[i].logit;
  return scratch_[size_t(chooser_->sample(merged_logits_))].id;
}

LogprobPart ShardedSampler::local_logprobs(std::span<const float> logits, TokenId picked) const {
  const Range mine = slices_[size_t(mine_)];
  if (int64_t(logits.size()) != mine.size())
    throw Error(fmt::format("sampler: {} logits for a vocabulary slice of {}", logits.size(), mine.size()));
  LogprobPart part;
  const LogSumExp lse = LogSumExp::of(logits);
  part.sum_exp = lse.sum;
  part.max = lse.max;
  if (picked >= mine.begin && picked < mine.end) part.picked_logit = logits[size_t(picked - mine.begin)];
  top_logits(logits, TokenId(mine.begin), size_t(params_.logprobs), part.top);
  for (size_t i = size_t(params_.logprobs); i < size_t(kMaxTopLogprobs); ++i) part.top[i] = TokenLogit{};
  return part;
}

SampledLogprobs ShardedSampler::merge_logprobs(std::span<const LogprobPart> parts, TokenId picked) const {
  if (parts.size() != slices_.size())
    throw Error(fmt::format("sampler: {} log-probability parts for {} vocabulary slices", parts.size(), slices_.size()));
  LogSumExp lse;
  float picked_logit = 0;
  std::vector<TokenLogit> candidates;
  for (size_t i = 0; i < parts.size(); ++i) {
    lse.combine({parts[i].max, parts[i].sum_exp});
    if (picked >= slices_[i].begin && picked < slices_[i].end) picked_logit = parts[i].picked_logit;
    candidates.insert(candidates.end(), parts[i].top, parts[i].top + params_.logprobs);
  }
  return finish_logprobs(lse, picked_logit, candidates, size_t(params_.logprobs));
}

void ShardedSampler::accept(TokenId id) {
  if (params_.penalty_window <= 0) return;
  recent_.push_back(id);
  if (recent_.size() > size_t(params_.penalty_window)) recent_.erase(recent_.begin());
}

}  // namespace shardlm::parallel
