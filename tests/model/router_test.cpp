// Expert routing on hand-made router logits: softmax and sigmoid gating, the
// selection bias, group-limited choice, renormalisation, scale, ties.
#include "model/router.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace shardlm::test {
namespace {

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

Routed route(const MoeSpec& m, const std::vector<float>& logits, const float* bias = nullptr) {
  ExpertRouter r(m);
  Routed out{std::vector<int32_t>(size_t(m.n_expert_used)), std::vector<float>(size_t(m.n_expert_used))};
  r.route(logits.data(), bias, out.ids.data(), out.weights.data());
  return out;
}

TEST(Router, SoftmaxTopTwoRenormalisedIsSoftmaxOverTheChosen) {
  MoeSpec m;
  m.n_expert = 4;
  m.n_expert_used = 2;
  m.weights_norm = true;
  const auto r = route(m, {0.5f, 2.0f, -1.0f, 1.0f});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 3}));
  const double e = std::exp(1.0);  // exp(2) / (exp(2) + exp(1))
  EXPECT_NEAR(r.weights[0], e / (e + 1), 1e-6);
  EXPECT_NEAR(r.weights[1], 1 / (e + 1), 1e-6);
}

TEST(Router, WithoutNormTheWeightsAreTheFullSoftmax) {
  MoeSpec m;
  m.n_expert = 3;
  m.n_expert_used = 1;
  const auto r = route(m, {0.0f, 0.0f, std::log(2.0f)});
  EXPECT_EQ(r.ids[0], 2);
  EXPECT_NEAR(r.weights[0], 0.5, 1e-6);  // 2 / (1 + 1 + 2)
}

TEST(Router, TiesGoToTheLowerExpert) {
  MoeSpec m;
  m.n_expert = 4;
  m.n_expert_used = 2;
  const auto r = route(m, {1.0f, 3.0f, 1.0f, 3.0f});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 3}));
}

// DeepSeek-V3 style: sigmoid scores, a bias that steers the choice but not the
// weights, 4 groups of 2 of which the best 2 (by the sum of their two best) stay.
TEST(Router, SigmoidBiasGroupsNormAndScale) {
  MoeSpec m;
  m.n_expert = 8;
  m.n_expert_used = 2;
  m.gating = ExpertGating::Sigmoid;
  m.selection_bias = true;
  m.weights_norm = true;
  m.weights_scale = 2.5f;
  m.n_group = 4;
  m.n_group_used = 2;
  // Expert 0 has the best single score, but its group {0, 1} sums lower than
  // groups {2, 3} and {6, 7}; expert 7 wins only through its bias.
  const std::vector<float> logits{3.0f, -3.0f, 1.0f, 1.0f, 0.0f, 0.0f, 0.9f, 0.8f};
  const std::vector<float> bias{0, 0, 0, 0, 0, 0, 0, 0.5f};
  const auto r = route(m, logits, bias.data());
  EXPECT_EQ(r.ids, (std::vector<int32_t>{7, 2}));
  auto sig = [](double x) { return 1 / (1 + std::exp(-x)); };
  const double s7 = sig(0.8), s2 = sig(1.0);
  EXPECT_NEAR(r.weights[0], 2.5 * s7 / (s7 + s2), 1e-6);
  EXPECT_NEAR(r.weights[1], 2.5 * s2 / (s7 + s2), 1e-6);
}

}  // namespace
}  // namespace shardlm::test
