#include "model/logprobs.h"

#include <algorithm>
#include <cmath>

namespace shardlm {
bool ranks_before(const TokenLogit& a, const TokenLogit& b) {
  const float ra = rank_of(a.logit), rb = rank_of(b.logit);
  return ra > rb || (ra == rb && a.id < b.id);
}

LogSumExp LogSumExp::of(std::span<const float> logits) {
  LogSumExp r;
  for (const float l : logits) r.max = std::max(r.max, l);
  if (!std::isfinite(r.max)) return r;
  for (const float l : logits) r.sum += double(std::exp(l - r.max));
  return r;
}

void LogSumExp::combine(const LogSumExp& other) {
  if (other.sum == 0) return;
  if (sum == 0) {
    *this = other;
    return;
  }
  const float m = std::max(max, other.max);
  sum = sum * std::exp(double(max) - double(m)) + other.sum * std::exp(double(other.max) - double(m));
  max = m;
}

double LogSumExp::value() const { return double(max) + std::log(sum); }

// One pass keeping a sorted list of at most n: n is small (≤ kMaxTopLogprobs
// in use), so this beats sorting a vocabulary-sized copy.
void top_logits(std::span<const float> logits, TokenId first, size_t n, TokenLogit* out) {
  if (n == 0) return;
  size_t kept = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const TokenLogit t{TokenId(first + TokenId(i)), logits[i]};
    if (kept == n && !ranks_before(t, out[n - 1])) continue;
    size_t at = kept < n ? kept++ : n - 1;
    for (; at > 0 && ranks_before(t, out[at - 1]); --at) out[at] = out[at - 1];
    out[at] = t;
  }
  for (size_t i = kept; i < n; ++i) out[i] = TokenLogit{};
}

SampledLogprobs finish_logprobs(const LogSumExp& lse, float picked_logit, std::span<const TokenLogit> candidates,
                                size_t n_top) {
  const double log_z = lse.value();
  const auto logprob = [&](float logit) { return float(double(logit) - log_z); };
  std::vector<TokenLogit> c;
  for (const TokenLogit& t : candidates)
    if (t.id >= 0) c.push_back(t);
  const size_t keep = std::min(n_top, c.size());
  std::partial_sort(c.begin(), c.begin() + std::ptrdiff_t(keep), c.end(), ranks_before);
  SampledLogprobs r;
  r.logprob = logprob(picked_logit);
  r.top.reserve(keep);
  for (size_t i = 0; i < keep; ++i) r.top.push_back({c[i].id, logprob(c[i].logit)});
  return r;
}

}  // namespace shardlm
