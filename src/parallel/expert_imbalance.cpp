#include "parallel/expert_imbalance.h"

#include <algorithm>

#include "core/error.h"

namespace shardlm::parallel {
namespace {

// splitmix64: a fixed, portable sequence (std:: distributions differ between
// standard libraries, and the planner's choice must not).
struct Sequence {
  uint64_t state = 0x5eed'0f'e4'be11'0a1cull;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n); the modulo bias (n / 2^64) is far below the sampling error.
  int64_t below(int64_t n) { return int64_t(next() % uint64_t(n)); }
};

// Enough trials for ~0.5 % standard error at one token, fewer for large
// steps (whose imbalance is small and varies little).
constexpr int64_t kPairBudget = int64_t(1) << 20;
constexpr int64_t kMinTrials = 256, kMaxTrials = 8192;

}  // namespace

double expected_busiest_share(int64_t n_expert, int64_t n_used, const std::vector<int64_t>& held, int64_t tokens) {
  int64_t total = 0;
  for (int64_t h : held) total += h;
  if (held.empty() || total != n_expert || n_used < 1 || n_used > n_expert || tokens < 1)
    throw Error("expected_busiest_share: inconsistent experts, placement or tokens");
  if (held.size() == 1) return 1.0;
  std::vector<int32_t> owner;
  for (size_t r = 0; r < held.size(); ++r) owner.insert(owner.end(), size_t(held[r]), int32_t(r));

  const int64_t trials = std::clamp(kPairBudget / (tokens * n_used), kMinTrials, kMaxTrials);
  Sequence seq;
  std::vector<int64_t> pairs(held.size());
  std::vector<int64_t> chosen_at(size_t(n_expert), -1);  // the token that last chose each expert
  double busiest = 0;
  int64_t token_id = 0;
  for (int64_t trial = 0; trial < trials; ++trial) {
    std::fill(pairs.begin(), pairs.end(), 0);
    for (int64_t t = 0; t < tokens; ++t, ++token_id) {
      // Floyd's sampling: n_used distinct experts in n_used draws.
      for (int64_t j = n_expert - n_used; j < n_expert; ++j) {
        int64_t e = seq.below(j + 1);
        if (chosen_at[size_t(e)] == token_id) e = j;
        chosen_at[size_t(e)] = token_id;
        ++pairs[size_t(owner[size_t(e)])];
      }
    }
    busiest += double(*std::max_element(pairs.begin(), pairs.end()));
  }
  const double mean = double(tokens * n_used) / double(held.size());
  return busiest / double(trials) / mean;
}

}  // namespace shardlm::parallel
