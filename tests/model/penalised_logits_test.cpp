// PenalisedLogits chooses from the logits in place; the reference penalises a
// full copy, then takes its first maximum (greedy) or partial-sorts it (top-k).
// Logits on a coarse grid (many ties), repeated recent tokens, penalised
// tokens at the ends of the slice, slices that start past id 0, -inf entries,
// logit biases inside and outside the slice, on recent tokens and others.
#include "model/penalised_logits.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <vector>

namespace shardlm {
namespace {

struct Case {
  SamplerParams params;
  TokenId first = 0;
  std::vector<float> logits;
  std::vector<TokenId> recent;
};

Case random_case(Rng& rng, int trial) {
  Case c;
  c.params.repeat_penalty = trial % 3 == 0 ? 1.0f : 1.3f;
  c.params.presence_penalty = trial % 2 ? 0.5f : 0.0f;
  c.params.frequency_penalty = trial % 5 ? 0.25f : 0.0f;
  c.params.penalty_window = 1 + int32_t(rng.next() % 16);
  c.first = TokenId(trial % 4 == 0 ? 0 : rng.next() % 1000);
  const int64_t n = 1 + int64_t(rng.next() % (trial % 7 == 0 ? 5000 : 300));
  c.logits.resize(size_t(n));
  for (float& l : c.logits)
    l = rng.next() % 50 == 0 ? -std::numeric_limits<float>::infinity() : float(int(rng.next() % 9) - 4) * 0.5f;
  // Recent tokens inside and outside the slice, and at its first and last id.
  for (int i = 0, k = int(rng.next() % 24); i < k; ++i)
    c.recent.push_back(TokenId(int64_t(c.first) - 5 + int64_t(rng.next() % uint64_t(n + 10))));
  if (trial % 6 == 1) c.recent.push_back(c.first);
  if (trial % 6 == 2) c.recent.push_back(TokenId(c.first + n - 1));
  if (c.recent.size() > size_t(c.params.penalty_window))
    c.recent.erase(c.recent.begin(), c.recent.end() - c.params.penalty_window);
  if (trial % 4 != 3) {
    for (TokenId id = TokenId(std::max<int64_t>(0, int64_t(c.first) - 3)); id < c.first + n + 3; id += TokenId(1 + rng.next() % 40))
      c.params.logit_bias.push_back({id, float(int(rng.next() % 9) - 4)});
    if (!c.recent.empty() && trial % 3 == 0 && (c.params.logit_bias.empty() || c.recent[0] > c.params.logit_bias.back().id))
      c.params.logit_bias.push_back({c.recent[0], 2.5f});
  }
  return c;
}

std::vector<TokenLogit> penalised_copy(const Case& c) {
  std::vector<TokenLogit> all(c.logits.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = {TokenId(c.first + TokenId(i)), c.logits[i]};
  std::vector<TokenId> seen;
  apply_penalties(c.params, c.recent, seen, c.first, TokenId(c.first + TokenId(all.size())),
                  [&](TokenId id) -> float& { return all[size_t(id - c.first)].logit; });
  return all;
}

TEST(PenalisedLogits, BestIsTheFirstMaximumOfAPenalisedCopy) {
  Rng rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const Case c = random_case(rng, trial);
    const auto all = penalised_copy(c);
    TokenLogit want = all[0];
    for (const auto& t : all)
      if (t.logit > want.logit) want = t;
    std::vector<TokenId> seen;
    const TokenLogit got = PenalisedLogits(c.params, c.recent, seen, c.first, c.logits).best();
    ASSERT_EQ(got.id, want.id) << "trial " << trial;
    ASSERT_EQ(got.logit, want.logit) << "trial " << trial;
  }
}

TEST(PenalisedLogits, TopIsThePartialSortOfAPenalisedCopy) {
  Rng rng(9);
  std::vector<TokenLogit> got;
  for (int trial = 0; trial < 300; ++trial) {
    const Case c = random_case(rng, trial);
    auto all = penalised_copy(c);
    // k below, at and above the selection's buffer (2k or 1024), and past the slice.
    const size_t k = std::vector<size_t>{1, 2, 5, 40, 600, 1023, 6000}[size_t(trial) % 7];
    const size_t keep = std::min(k, all.size());
    std::partial_sort(all.begin(), all.begin() + std::ptrdiff_t(keep), all.end(), ranks_before);
    all.resize(keep);
    std::vector<TokenId> seen;
    PenalisedLogits(c.params, c.recent, seen, c.first, c.logits).top(k, got);
    ASSERT_EQ(got.size(), all.size()) << "trial " << trial;
    for (size_t i = 0; i < keep; ++i) {
      ASSERT_EQ(got[i].id, all[i].id) << "trial " << trial << " rank " << i;
      ASSERT_EQ(got[i].logit, all[i].logit) << "trial " << trial << " rank " << i;
    }
  }
}

// Each id is asked for once, in increasing order; a bias adds before the penalty.
TEST(PenalisedLogits, BiasComesBeforeThePenalty) {
  SamplerParams p;
  p.repeat_penalty = 2.0f;
  p.logit_bias = {{1, 1.0f}, {3, -4.0f}, {7, 5.0f}};
  std::vector<float> logits{1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
  const std::vector<TokenId> recent{3, 0, 3};
  std::vector<TokenId> seen, asked;
  apply_penalties(p, recent, seen, 0, 5, [&](TokenId id) -> float& {
    asked.push_back(id);
    return logits[size_t(id)];
  });
  EXPECT_EQ(asked, (std::vector<TokenId>{0, 1, 3}));  // 7 is outside [0, 5)
  EXPECT_EQ(logits, (std::vector<float>{0.5f, 2.0f, 1.0f, -6.0f, 1.0f}));  // 3: (1 - 4) * 2
}

TEST(PenalisedLogits, NaNIsNeverBest) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> logits{nan, -1.f, 2.f, nan, 2.f};
  SamplerParams p;
  std::vector<TokenId> seen;
  const PenalisedLogits slice(p, {}, seen, 10, logits);
  EXPECT_EQ(slice.best().id, 12);
  std::vector<TokenLogit> top;
  slice.top(3, top);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].id, 12);
  EXPECT_EQ(top[1].id, 14);
  EXPECT_EQ(top[2].id, 11);
}

}  // namespace
}  // namespace shardlm
