// Log-probabilities of sampled tokens (model/logprobs.h): against a
// log-softmax computed here in long double, the top list's order and ties,
// and that penalties, temperature and truncation do not change them.
#include "model/logprobs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "model/sampler.h"

namespace shardlm {
namespace {

std::vector<double> log_softmax(const std::vector<float>& logits) {
  long double max = logits[0], sum = 0;
  for (const float l : logits) max = std::max<long double>(max, l);
  for (const float l : logits) sum += std::exp(l - max);
  std::vector<double> out;
  for (const float l : logits) out.push_back(double(l - max - std::log(sum)));
  return out;
}

std::vector<float> random_logits(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 4.0f);
  std::vector<float> l(n);
  for (float& x : l) x = d(gen);
  return l;
}

SamplerParams asking(int32_t top, float temperature = 0) {
  SamplerParams p;
  p.temperature = temperature;
  p.logprobs = top;
  return p;
}

TEST(Logprobs, GreedyPickAndTopListMatchALogSoftmax) {
  const auto logits = random_logits(5000, 1);
  const auto want = log_softmax(logits);
  Sampler s(asking(20), int64_t(logits.size()));
  SampledLogprobs lp;
  const TokenId t = s.sample(logits, &lp);
  EXPECT_NEAR(lp.logprob, want[size_t(t)], 1e-5);
  ASSERT_EQ(lp.top.size(), 20u);
  EXPECT_EQ(lp.top[0].id, t) << "a greedy pick has the largest log-probability";
  EXPECT_EQ(lp.top[0].logprob, lp.logprob);
  for (size_t i = 0; i < lp.top.size(); ++i) {
    EXPECT_NEAR(lp.top[i].logprob, want[size_t(lp.top[i].id)], 1e-5);
    if (i > 0) {
      EXPECT_LE(lp.top[i].logprob, lp.top[i - 1].logprob);
    }
  }
  // Nothing outside the list beats its last entry.
  size_t above = 0;
  for (const double w : want) above += w > double(lp.top.back().logprob) + 1e-6;
  EXPECT_EQ(above, 19u);
}

TEST(Logprobs, TiesGoToTheLowestIdAndShortVocabulariesGiveShortLists) {
  const std::vector<float> logits{1, 3, 3, 0, 3};
  Sampler s(asking(4), 5);
  SampledLogprobs lp;
  EXPECT_EQ(s.sample(logits, &lp), 1);
  ASSERT_EQ(lp.top.size(), 4u);
  EXPECT_EQ(lp.top[0].id, 1);
  EXPECT_EQ(lp.top[1].id, 2);
  EXPECT_EQ(lp.top[2].id, 4);
  EXPECT_EQ(lp.top[3].id, 0);
  EXPECT_NEAR(lp.top[1].logprob, std::log(std::exp(3.0) / (3 * std::exp(3.0) + std::exp(1.0) + 1)), 1e-6);
  Sampler wide(asking(20), 5);
  wide.sample(logits, &lp);
  EXPECT_EQ(lp.top.size(), 5u);
  Sampler none(asking(0), 5);
  none.sample(logits, &lp);
  EXPECT_TRUE(lp.top.empty());
  EXPECT_NEAR(lp.logprob, std::log(std::exp(3.0) / (3 * std::exp(3.0) + std::exp(1.0) + 1)), 1e-6);
}

TEST(Logprobs, ComeFromTheRawLogitsNotThePenalisedOrTruncatedOnes) {
  const std::vector<float> logits{2.0f, 1.9f, 0.5f, -1.0f};
  const auto want = log_softmax(logits);
  SamplerParams p = asking(2);
  p.repeat_penalty = 4.0f;  // makes token 1 the greedy pick
  Sampler s(p, 4);
  s.accept(0);
  SampledLogprobs lp;
  EXPECT_EQ(s.sample(logits, &lp), 1);
  EXPECT_NEAR(lp.logprob, want[1], 1e-6);
  EXPECT_EQ(lp.top[0].id, 0) << "the top list ignores the penalty";
  EXPECT_NEAR(lp.top[0].logprob, want[0], 1e-6);
  SamplerParams q = asking(3, 0.3f);
  q.top_k = 1;
  Sampler t(q, 4);
  EXPECT_EQ(t.sample(logits, &lp), 0);
  EXPECT_NEAR(lp.logprob, want[0], 1e-6) << "temperature and top-k do not change it";
  EXPECT_EQ(lp.top.size(), 3u);
}

TEST(Logprobs, NotComputedUnlessAskedAndOutOfRangeRefused) {
  Sampler s(asking(-1), 3);
  SampledLogprobs lp;
  lp.logprob = 7;
  s.sample(std::vector<float>{1, 2, 3}, &lp);
  EXPECT_EQ(lp.logprob, 7) << "untouched when the parameters do not ask";
  EXPECT_THROW(Sampler(asking(kMaxTopLogprobs + 1), 3), Error);
}

TEST(Logprobs, SlicesCombineToTheWholeVocabulary) {
  const auto logits = random_logits(1001, 2);
  const LogSumExp whole = LogSumExp::of(logits);
  for (const size_t cut : {size_t(1), size_t(500), size_t(1000)}) {
    LogSumExp parts = LogSumExp::of(std::span(logits).first(cut));
    parts.combine(LogSumExp::of(std::span(logits).subspan(cut)));
    EXPECT_NEAR(parts.value(), whole.value(), 1e-9);
  }
  std::vector<TokenLogit> a(3), b(3);
  top_logits(std::span(logits).first(500), 0, 3, a.data());
  top_logits(std::span(logits).subspan(500), 500, 3, b.data());
  a.insert(a.end(), b.begin(), b.end());
  std::vector<TokenLogit> all(3);
  top_logits(logits, 0, 3, all.data());
  const auto merged = finish_logprobs(whole, logits[0], a, 3);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(merged.top[i].id, all[i].id);
}

// A model that writes NaN must not break the ordering (sorting needs a strict
// weak order): NaN ranks with -inf, below every number, as in the sampler.
TEST(Logprobs, NaNLogitsRankLast) {
  const float nan = std::nanf("");
  const std::vector<float> logits = {nan, 1.0f, nan, 3.0f, -2.0f, nan};
  std::vector<TokenLogit> top(4);
  top_logits(logits, 10, 4, top.data());
  EXPECT_EQ(top[0].id, 13);
  EXPECT_EQ(top[1].id, 11);
  EXPECT_EQ(top[2].id, 14);
  EXPECT_EQ(top[3].id, 10);  // the first NaN fills the last place
  std::vector<TokenLogit> candidates;
  for (int i = 0; i < 6; ++i) candidates.push_back({TokenId(10 + i), logits[size_t(i)]});
  const auto r = finish_logprobs(LogSumExp::of(std::span(logits).subspan(1, 2)), 1.0f, candidates, 6);
  ASSERT_EQ(r.top.size(), 6u);
  EXPECT_EQ(r.top[0].id, 13);
  EXPECT_EQ(r.top[1].id, 11);
  EXPECT_EQ(r.top[2].id, 14);
  EXPECT_EQ(r.top[3].id, 10);
  EXPECT_EQ(r.top[4].id, 12);
  EXPECT_EQ(r.top[5].id, 15);
}

}  // namespace
}  // namespace shardlm
