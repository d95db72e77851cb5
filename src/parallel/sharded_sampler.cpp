#include "parallel/sharded_sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "core/error.h"

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
  chooser_ = std::make_unique<Sampler>(chooser, int64_t(merged));
  merged_logits_.resize(merged);
}

void ShardedSampler::local_candidates(std::span<const float> logits, Candidate* out) {
  const Range mine = slices_[size_t(mine_)];
  if (int64_t(logits.size()) != mine.size())
    throw Error(fmt::format("sampler: {} logits for a vocabulary slice of {}", logits.size(), mine.size()));
  if (per_rank_ == 1) {
    out[0] = best_candidate(logits, mine);
    return;
  }
  scratch_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) scratch_[i] = {TokenId(mine.begin + int64_t(i)), logits[i]};
  apply_penalties(mine);
  const size_t keep = std::min(per_rank_, scratch_.size());
  const auto better = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  std::partial_sort(scratch_.begin(), scratch_.begin() + std::ptrdiff_t(keep), scratch_.end(), better);
  for (size_t i = 0; i < per_rank_; ++i) out[i] = i < keep ? scratch_[i] : Candidate{};
}

// Greedy keeps one candidate: the highest penalised logit, the lowest id
// among equals (the order local_candidates sorts by), read in place by the
// single node's greedy rule: a candidate per vocabulary entry and a partial
// sort over them cost ~10x that, per sequence and step.
Candidate ShardedSampler::best_candidate(std::span<const float> logits, Range mine) {
  if (logits.empty()) return {};
  const GreedyPick best = greedy_pick(params_, recent_, seen_, TokenId(mine.begin), logits);
  return {TokenId(mine.begin + int64_t(best.index)), best.logit};
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

// The single-node Sampler's penalties, on the recent tokens inside this slice.
void ShardedSampler::apply_penalties(Range mine) {
  shardlm::apply_penalties(params_, recent_, seen_, TokenId(mine.begin), TokenId(mine.end),
                           [&](TokenId id) -> float& { return scratch_[size_t(id - mine.begin)].logit; });
}

void ShardedSampler::accept(TokenId id) {
  if (params_.penalty_window <= 0) return;
  recent_.push_back(id);
  if (recent_.size() > size_t(params_.penalty_window)) recent_.erase(recent_.begin());
}

}  // namespace shardlm::parallel
