// The expected routing imbalance of whole-expert placement against exact
// values and its expected trends.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "parallel/expert_imbalance.h"

namespace shardlm::parallel {
namespace {

double choose(int64_t n, int64_t k) {
  double r = 1;
  for (int64_t i = 1; i <= k; ++i) r = r * double(n - k + i) / double(i);
  return r;
}

// One token over two ranks holding half the experts each: the pairs on the
// first rank are hypergeometric, so E[max] is a finite sum.
double exact_two_ranks(int64_t n_expert, int64_t n_used) {
  const int64_t half = n_expert / 2;
  double e = 0;
  for (int64_t x = 0; x <= n_used; ++x)
    e += double(std::max(x, n_used - x)) * choose(half, x) * choose(n_expert - half, n_used - x) /
         choose(n_expert, n_used);
  return e / (double(n_used) / 2);
}

TEST(ExpertImbalance, MatchesTheHypergeometricForOneTokenOverTwoRanks) {
  EXPECT_NEAR(expected_busiest_share(128, 8, {64, 64}, 1), exact_two_ranks(128, 8), 0.01);  // Qwen3-MoE: ~1.27
  EXPECT_NEAR(expected_busiest_share(8, 2, {4, 4}, 1), exact_two_ranks(8, 2), 0.01);        // Mixtral: 1 + 12/28
  EXPECT_NEAR(expected_busiest_share(256, 8, {128, 128}, 1), exact_two_ranks(256, 8), 0.01);
}

TEST(ExpertImbalance, BalancedCasesAreOne) {
  EXPECT_EQ(expected_busiest_share(128, 8, {128}, 1), 1.0);
  EXPECT_DOUBLE_EQ(expected_busiest_share(8, 8, {4, 4}, 3), 1.0);  // every expert chosen by every token
}

TEST(ExpertImbalance, ShrinksWithTokensGrowsWithRanksAndIsDeterministic) {
  const double one = expected_busiest_share(128, 8, {64, 64}, 1);
  const double four = expected_busiest_share(128, 8, {64, 64}, 4);
  const double many = expected_busiest_share(128, 8, {64, 64}, 256);
  EXPECT_GT(one, four);
  EXPECT_GT(four, many);
  EXPECT_LT(many, 1.05);
  EXPECT_GT(expected_busiest_share(128, 8, {32, 32, 32, 32}, 1), one);
  EXPECT_EQ(expected_busiest_share(128, 8, {64, 64}, 4), four);
  // Unequal holdings: the rank with three quarters of the experts gets ~1.5× the mean rank's pairs.
  EXPECT_NEAR(expected_busiest_share(128, 8, {96, 32}, 64), 1.5, 0.05);
}

TEST(ExpertImbalance, InconsistentArgumentsAreErrors) {
  EXPECT_THROW(expected_busiest_share(128, 8, {64, 63}, 1), Error);
  EXPECT_THROW(expected_busiest_share(8, 9, {4, 4}, 1), Error);
  EXPECT_THROW(expected_busiest_share(8, 2, {4, 4}, 0), Error);
  EXPECT_THROW(expected_busiest_share(8, 2, {}, 1), Error);
}

}  // namespace
}  // namespace shardlm::parallel
