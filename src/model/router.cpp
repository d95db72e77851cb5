#include "model/router.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/ops.h"

namespace shardlm {
namespace {

// Indices of the k largest values, best first, ties to the lower index.
void top_k(const float* v, int64_t n, int64_t k, int32_t* out) {
  thread_local std::vector<int32_t> order;
  order.resize(size_t(n));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  std::copy(order.begin(), order.begin() + k, out);
}

}  // namespace

ExpertRouter::ExpertRouter(const MoeSpec& spec) : m_(spec) {
  probs_.resize(size_t(m_.n_expert));
  select_.resize(size_t(m_.n_expert));
  group_score_.resize(size_t(m_.n_group));
}

void ExpertRouter::route(const float* logits, const float* bias, int32_t* experts, float* weights) {
  const int64_t n = m_.n_expert, k = m_.n_expert_used;
  std::copy(logits, logits + n, probs_.begin());
  if (m_.gating == ExpertGating::Softmax)
    ops::softmax(probs_.data(), n);
  else
    for (auto& p : probs_) p = 1.0f / (1.0f + std::exp(-p));
  // The bias steers the choice only; the weights stay the unbiased scores.
  for (int64_t e = 0; e < n; ++e) select_[size_t(e)] = probs_[size_t(e)] + (bias ? bias[e] : 0.0f);

  if (m_.n_group > 1) {
    // A group's score is the sum of its two best; experts outside the best
    // n_group_used groups cannot be chosen.
    const int64_t per = n / m_.n_group;
    for (int64_t g = 0; g < m_.n_group; ++g) {
      const float* s = &select_[size_t(g * per)];
      int32_t best[2] = {0, 0};
      const int64_t take = std::min<int64_t>(2, per);
      top_k(s, per, take, best);
      group_score_[size_t(g)] = s[best[0]] + (take > 1 ? s[best[1]] : 0.0f);
    }
    thread_local std::vector<int32_t> kept;
    kept.resize(size_t(m_.n_group_used));
    top_k(group_score_.data(), m_.n_group, m_.n_group_used, kept.data());
    for (int64_t g = 0; g < m_.n_group; ++g)
      if (std::find(kept.begin(), kept.end(), int32_t(g)) == kept.end())
        std::fill_n(&select_[size_t(g * per)], per, -std::numeric_limits<float>::infinity());
  }

  top_k(select_.data(), n, k, experts);
  float sum = 0;
  for (int64_t i = 0; i < k; ++i) sum += weights[i] = probs_[size_t(experts[i])];
  // The floor keeps a sum of vanishing sigmoid scores from dividing by ~0.
  const float norm = m_.weights_norm ? 1.0f / std::max(sum, 6.103515625e-5f) : 1.0f;
  for (int64_t i = 0; i < k; ++i) weights[i] *= norm * m_.weights_scale;
}

}  // namespace shardlm
