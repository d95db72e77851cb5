#include "model/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "core/error.h"

namespace shardlm {
namespace {

SamplerParams greedy() {
  SamplerParams p;
  p.temperature = 0;
  return p;
}

SamplerParams plain(float temp, uint64_t seed) {  // no truncation at all
  SamplerParams p;
  p.temperature = temp;
  p.top_k = 0;
  p.top_p = 1;
  p.min_p = 0;
  p.seed = seed;
  return p;
}

TEST(Rng, KnownSequenceForSeedZero) {
  // Pinned outputs: a change of generator would silently change every seeded run.
  Rng a(0), b(0), c(1);
  const uint64_t first = a.next();
  EXPECT_EQ(first, b.next());
  EXPECT_NE(first, c.next());
  Rng d(0);
  std::vector<uint64_t> seq;
  for (int i = 0; i < 3; ++i) seq.push_back(d.next());
  EXPECT_EQ(seq, (std::vector<uint64_t>{0x99ec5f36cb75f2b4ull, 0xbf6e1f784956452aull, 0x1a5f849d4933e6e0ull}));
}

TEST(Rng, UniformIsInUnitInterval) {
  Rng r(7);
  double sum = 0;
  for (int i = 0; i < 10000; ++i) {
    const double u = r.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
}

TEST(Sampler, GreedyPicksMaximumAndLowestIdOnTies) {
  Sampler s(greedy(), 5);
  EXPECT_EQ(s.sample(std::vector<float>{0.1f, 3.0f, -1.0f, 2.0f, 0.0f}), 1);
  EXPECT_EQ(s.sample(std::vector<float>{1.0f, 4.0f, 4.0f, 2.0f, 4.0f}), 1);
  EXPECT_EQ(argmax(std::vector<float>{5.0f, 5.0f, 1.0f}), 0);
}

TEST(Sampler, RejectsWrongLogitCount) {
  Sampler s(greedy(), 5);
  EXPECT_THROW(s.sample(std::vector<float>{1, 2, 3}), Error);
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferentTokens) {
  std::vector<float> logits(64);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = float(std::sin(double(i)));
  auto run = [&](uint64_t seed) {
    Sampler s(plain(1.0f, seed), 64);
    std::vector<TokenId> out;
    for (int i = 0; i < 50; ++i) out.push_back(s.sample(logits));
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(Sampler, FrequenciesFollowSoftmaxAtTemperature) {
  const std::vector<float> logits{0.0f, 1.0f, 2.0f};
  const float temp = 2.0f;
  Sampler s(plain(temp, 1), 3);
  std::map<TokenId, int> count;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++count[s.sample(logits)];
  double z = 0;
  for (float l : logits) z += std::exp(l / temp);
  for (TokenId id = 0; id < 3; ++id)
    EXPECT_NEAR(double(count[id]) / n, std::exp(logits[size_t(id)] / temp) / z, 0.015) << "token " << id;
}

TEST(Sampler, TopKKeepsOnlyTheKBest) {
  SamplerParams p = plain(5.0f, 3);
  p.top_k = 2;
  Sampler s(p, 6);
  const std::vector<float> logits{1.0f, 5.0f, 2.0f, 4.9f, 0.0f, 3.0f};
  std::set<TokenId> seen;
  for (int i = 0; i < 500; ++i) seen.insert(s.sample(logits));
  EXPECT_EQ(seen, (std::set<TokenId>{1, 3}));
}

TEST(Sampler, TopPKeepsTheSmallestSetReachingP) {
  // Probabilities ≈ 0.665, 0.245, 0.090: top-p 0.8 keeps the first two.
  SamplerParams p = plain(1.0f, 5);
  p.top_p = 0.8f;
  Sampler s(p, 3);
  const std::vector<float> logits{2.0f, 1.0f, 0.0f};
  std::set<TokenId> seen;
  for (int i = 0; i < 2000; ++i) seen.insert(s.sample(logits));
  EXPECT_EQ(seen, (std::set<TokenId>{0, 1}));
}

TEST(Sampler, MinPDropsTokensFarBelowTheBest) {
  // Relative probabilities 1, e^-1 ≈ 0.37, e^-3 ≈ 0.05: min-p 0.1 drops the last.
  SamplerParams p = plain(1.0f, 9);
  p.min_p = 0.1f;
  Sampler s(p, 3);
  const std::vector<float> logits{3.0f, 2.0f, 0.0f};
  std::set<TokenId> seen;
  for (int i = 0; i < 2000; ++i) seen.insert(s.sample(logits));
  EXPECT_EQ(seen, (std::set<TokenId>{0, 1}));
}

TEST(Sampler, RepetitionPenaltyChangesTheGreedyChoice) {
  SamplerParams p = greedy();
  p.repeat_penalty = 2.0f;
  Sampler s(p, 3);
  const std::vector<float> logits{3.0f, 2.0f, -1.0f};
  EXPECT_EQ(s.sample(logits), 0);
  s.accept(0);  // 3 → 1.5, below token 1
  EXPECT_EQ(s.sample(logits), 1);
}

TEST(Sampler, LogitBiasMovesTheChoice) {
  SamplerParams p = greedy();
  p.logit_bias = {{0, -100.0f}, {2, 1.5f}};
  Sampler s(p, 3);
  EXPECT_EQ(s.sample(std::vector<float>{3.0f, 2.0f, 1.0f}), 2);  // 3 - 100, 2, 1 + 1.5
  p.temperature = 1.0f;
  p.top_k = 0;
  p.logit_bias = {{1, 100.0f}};
  Sampler sure(p, 3);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(sure.sample(std::vector<float>{3.0f, 2.0f, 1.0f}), 1);
}

TEST(Sampler, RepetitionPenaltyMultipliesNegativeLogits) {
  SamplerParams p = greedy();
  p.repeat_penalty = 2.0f;
  Sampler s(p, 2);
  const std::vector<float> logits{-1.0f, -1.5f};
  s.accept(0);  // -1 → -2, below token 1
  EXPECT_EQ(s.sample(logits), 1);
}

TEST(Sampler, PresencePenaltyAndItsWindow) {
  SamplerParams p = greedy();
  p.presence_penalty = 1.0f;
  p.penalty_window = 2;
  Sampler s(p, 3);
  const std::vector<float> logits{2.0f, 1.5f, 0.0f};
  s.accept(0);
  EXPECT_EQ(s.sample(logits), 1);  // 2 - 1 < 1.5
  s.accept(2);
  s.accept(2);  // token 0 has left the window of 2
  EXPECT_EQ(s.sample(logits), 0);
}

TEST(Sampler, FrequencyPenaltyCountsOccurrences) {
  SamplerParams p = greedy();
  p.frequency_penalty = 0.4f;
  Sampler s(p, 3);
  const std::vector<float> logits{2.0f, 1.5f, 0.0f};
  s.accept(0);
  EXPECT_EQ(s.sample(logits), 0);  // 2 - 0.4 > 1.5
  s.accept(0);
  EXPECT_EQ(s.sample(logits), 1);  // 2 - 0.8 < 1.5
}

// The greedy path reads the logits in place; the reference penalises a full
// copy and takes its first maximum. Ties (logits on a coarse grid) and
// repeated recent tokens included.
TEST(Sampler, GreedyMatchesPenalisedCopyArgmax) {
  Rng rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    SamplerParams p = greedy();
    p.repeat_penalty = trial % 3 == 0 ? 1.0f : 1.3f;
    p.presence_penalty = trial % 2 ? 0.5f : 0.0f;
    p.frequency_penalty = trial % 5 ? 0.25f : 0.0f;
    p.penalty_window = 1 + int32_t(rng.next() % 16);
    const int64_t n_vocab = 1 + int64_t(rng.next() % 300);
    std::vector<float> logits(static_cast<size_t>(n_vocab));
    for (float& l : logits) l = float(int(rng.next() % 9) - 4) * 0.5f;
    Sampler s(p, n_vocab);
    std::vector<TokenId> recent;
    for (int i = 0, n = int(rng.next() % 24); i < n; ++i) {
      const auto t = TokenId(rng.next() % uint64_t(n_vocab));
      s.accept(t);
      recent.push_back(t);
    }
    if (recent.size() > size_t(p.penalty_window)) recent.erase(recent.begin(), recent.end() - p.penalty_window);
    std::vector<float> penalised = logits;
    std::vector<TokenId> scratch;
    apply_penalties(p, recent, scratch, 0, TokenId(n_vocab), [&](TokenId id) -> float& { return penalised[size_t(id)]; });
    EXPECT_EQ(s.sample(logits), argmax(penalised)) << "trial " << trial;
  }
}

TEST(Sampler, LowTemperatureIsAlmostGreedy) {
  Sampler s(plain(0.01f, 11), 4);
  const std::vector<float> logits{1.0f, 2.0f, 1.5f, 0.5f};
  for (int i = 0; i < 100; ++i) EXPECT_EQ(s.sample(logits), 1);
}

}  // namespace
}  // namespace shardlm
