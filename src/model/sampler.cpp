#include "model/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/ops.h"
#include "model/penalised_logits.h"

namespace shardlm {

Rng::Rng(uint64_t seed) {
  for (auto& s : s_) {  // splitmix64: any seed, including 0, gives a good state
    seed += 0x9e3779b97f4a7c15ull;
    uint64_t z = seed;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    s = z ^ (z >> 31);
  }
}

uint64_t Rng::next() {
  const auto rotl = [](uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return double(next() >> 11) * 0x1.0p-53; }

TokenId argmax(std::span<const float> logits) { return TokenId(ops::argmax(logits.data(), int64_t(logits.size()))); }

Sampler::Sampler(const SamplerParams& params, int64_t n_vocab) : p_(params), n_vocab_(n_vocab), rng_(params.seed) {
  if (n_vocab < 1) throw Error("sampler: empty vocabulary");
  if (p_.repeat_penalty <= 0) throw Error(fmt::format("sampler: repeat penalty {} must be positive", p_.repeat_penalty));
  if (p_.logprobs > kMaxTopLogprobs)
    throw Error(fmt::format("sampler: {} top log-probabilities asked, at most {}", p_.logprobs, kMaxTopLogprobs));
  cand_.reserve(size_t(n_vocab));
  probs_.resize(size_t(n_vocab));
  recent_.reserve(size_t(std::max(p_.penalty_window, 0)));
}

void Sampler::accept(TokenId id) {
  if (p_.penalty_window <= 0) return;
  if (recent_.size() < size_t(p_.penalty_window)) {
    recent_.push_back(id);
  } else {
    recent_[recent_next_] = id;
    recent_next_ = (recent_next_ + 1) % recent_.size();
  }
}

// Top-k selects straight from the logits (PenalisedLogits::top); without
// top-k every candidate is ranked.
void Sampler::rank(std::span<const float> logits) {
  if (p_.top_k > 0 && p_.top_k < n_vocab_) {
    PenalisedLogits(p_, recent_, seen_, 0, logits).top(size_t(p_.top_k), cand_);
    return;
  }
  cand_.resize(logits.size());
  for (size_t i = 0; i < cand_.size(); ++i) cand_[i] = {TokenId(i), logits[i]};
  shardlm::apply_penalties(p_, recent_, seen_, 0, TokenId(n_vocab_),
                           [&](TokenId id) -> float& { return cand_[size_t(id)].logit; });
  std::sort(cand_.begin(), cand_.end(), ranks_before);
}

size_t Sampler::truncate() {
  size_t n = cand_.size();
  // Probabilities at temperature 1 decide top-p and min-p, as in llama.cpp.
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    probs_[i] = std::exp(cand_[i].logit - cand_[0].logit);
    sum += probs_[i];
  }
  if (p_.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < n; ++i) {
      cum += probs_[i] / sum;
      if (cum >= double(p_.top_p)) {
        n = i + 1;
        break;
      }
    }
  }
  if (p_.min_p > 0.0f) {
    size_t keep = 1;  // probs_[0] is the maximum (= 1 before normalising)
    while (keep < n && probs_[keep] >= p_.min_p) ++keep;
    n = keep;
  }
  return n;
}

TokenId Sampler::sample(std::span<const float> logits, SampledLogprobs* logprobs) {
  if (int64_t(logits.size()) != n_vocab_)
    throw Error(fmt::format("sampler: {} logits for a vocabulary of {}", logits.size(), n_vocab_));
  TokenId picked;
  if (p_.temperature <= 0.0f) {
    picked = PenalisedLogits(p_, recent_, seen_, 0, logits).best().id;
  } else {
    picked = pick(logits);
  }
  if (logprobs && p_.logprobs >= 0) {
    top_.resize(size_t(p_.logprobs));
    top_logits(logits, 0, top_.size(), top_.data());
    *logprobs = finish_logprobs(LogSumExp::of(logits), logits[size_t(picked)], top_, top_.size());
  }
  return picked;
}

TokenId Sampler::pick(std::span<const float> logits) {
  rank(logits);
  const size_t n = truncate();
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    probs_[i] = float(std::exp(double(cand_[i].logit - cand_[0].logit) / double(p_.temperature)));
    sum += probs_[i];
  }
  const double target = rng_.uniform() * sum;
  double cum = 0;
  for (size_t i = 0; i < n; ++i) {
    cum += probs_[i];
    if (target < cum) return cand_[i].id;
  }
  return cand_[n - 1].id;
}

}  // namespace shardlm
