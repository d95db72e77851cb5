// plan_prompt_chunks: shortest remainder first, and prompts read side by side
// (a cohort, bounded in steps) take their last token in the same step.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "serve/prompt_chunks.h"

namespace shardlm::serve {
namespace {

struct Reading {
  std::vector<int64_t> finished_at;  // step index each prompt took its last token in
  int64_t steps = 0;
};

// Plans steps until every prompt is read; remainders must be sorted (they stay so: equal chunks never reorder them
// except as the scheduler's stable sort would, which this replays).
Reading read_all(std::vector<int64_t> remainders, int64_t budget, int64_t cohort_steps) {
  Reading out;
  out.finished_at.assign(remainders.size(), -1);
  std::vector<size_t> order(remainders.size());
  std::iota(order.begin(), order.end(), 0);
  for (; out.steps < 100000; ++out.steps) {
    std::vector<size_t> live;
    for (size_t i : order)
      if (remainders[i] > 0) live.push_back(i);
    if (live.empty()) break;
    std::stable_sort(live.begin(), live.end(), [&](size_t a, size_t b) { return remainders[a] < remainders[b]; });
    order = live;
    std::vector<int64_t> rem;
    for (size_t i : live) rem.push_back(remainders[i]);
    const auto take = plan_prompt_chunks(rem, budget, cohort_steps);
    EXPECT_EQ(take.size(), rem.size());
    int64_t sum = 0;
    for (size_t j = 0; j < live.size(); ++j) {
      EXPECT_GE(take[j], 0);
      EXPECT_LE(take[j], rem[j]);
      sum += take[j];
      remainders[live[j]] -= take[j];
      if (take[j] > 0 && remainders[live[j]] == 0) out.finished_at[live[j]] = out.steps;
    }
    EXPECT_GT(sum, 0) << "no progress at step " << out.steps;
    EXPECT_LE(sum, budget);
    if (sum == 0) break;
  }
  return out;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

TEST(PromptChunks, ShortestRemainderFirstWithoutACohort) {
  EXPECT_EQ(plan_prompt_chunks(std::vector<int64_t>{3, 80}, 8, 0), (std::vector<int64_t>{3, 5}));
  const auto r = read_all({76, 76, 76, 76}, 64, 0);
  EXPECT_EQ(r.finished_at, (std::vector<int64_t>{1, 2, 3, 4})) << "each prompt finishes as soon as it can";
}

TEST(PromptChunks, ABurstOfPromptsFinishesInOneStepWithoutExtraSteps) {
  // Eight ~76-token prompts and the serve default budget: 609 tokens, three steps.
  const std::vector<int64_t> burst = {74, 75, 76, 76, 76, 77, 77, 78};
  const auto r = read_all(burst, 256, 8);
  EXPECT_EQ(r.steps, ceil_div(609, 256));
  for (int64_t at : r.finished_at) EXPECT_EQ(at, r.steps - 1) << "every prompt samples in the last step";
  // The first step reads no prompt's last token.
  const auto first = plan_prompt_chunks(burst, 256, 8);
  for (size_t i = 0; i < burst.size(); ++i) EXPECT_LT(first[i], burst[i]);
}

TEST(PromptChunks, TheCohortIsBoundedInSteps) {
  // A short prompt beside one that needs more than cohort_steps steps is not held back.
  auto r = read_all({5, 3000}, 256, 8);
  EXPECT_EQ(r.finished_at[0], 0);
  EXPECT_EQ(r.finished_at[1], ceil_div(3005, 256) - 1);
  // Beside decoding sequences the budget is paced: two short prompts finish together, a third does not wait.
  r = read_all({20, 30, 200}, 16, 4);
  EXPECT_EQ(r.finished_at[0], r.finished_at[1]);
  EXPECT_EQ(r.finished_at[0], ceil_div(50, 16) - 1);
  EXPECT_GT(r.finished_at[2], r.finished_at[1]);
}

TEST(PromptChunks, MoreLastTokensThanTheBudgetStillProgress) {
  auto r = read_all({1, 1, 1, 1, 1}, 2, 8);
  EXPECT_EQ(r.steps, 3);
  r = read_all({1, 1, 9}, 1, 8);
  EXPECT_EQ(r.steps, 11);
}

TEST(PromptChunks, RandomRemaindersAreReadWithinTheBudgetAndCohortsFinishTogether) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t budget = 1 + int64_t(rng() % 64);
    const int64_t cohort_steps = int64_t(rng() % 6);
    std::vector<int64_t> rem(1 + rng() % 10);
    for (auto& x : rem) x = 1 + int64_t(rng() % 150);
    std::sort(rem.begin(), rem.end());
    const int64_t total = std::accumulate(rem.begin(), rem.end(), int64_t(0));
    const auto r = read_all(rem, budget, cohort_steps);
    for (int64_t at : r.finished_at) ASSERT_GE(at, 0);
    // Prompts that fit the bound from the start, and no more than budget of them, finish in one step.
    if (cohort_steps > 0 && total <= cohort_steps * budget && int64_t(rem.size()) <= budget) {
      for (int64_t at : r.finished_at) EXPECT_EQ(at, r.steps - 1) << "trial " << trial;
      EXPECT_EQ(r.steps, ceil_div(total, budget)) << "trial " << trial;
    }
  }
}

}  // namespace
}  // namespace shardlm::serve
