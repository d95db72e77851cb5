// Generation through the distributed engine's step API, for tests: each
// prompt in chunks of the step size (the last entry samples), then one step
// per token with an entry for every sequence.
#pragma once

#include <algorithm>
#include <vector>

#include "parallel/distributed_session.h"

namespace shardlm::parallel::testing {

// Sequence i uses params with seed + i, in slot i.
inline std::vector<std::vector<TokenId>> generate_steps(DistributedSession& s,
                                                        const std::vector<std::vector<TokenId>>& prompts,
                                                        const SamplerParams& params, int n) {
  std::vector<std::vector<TokenId>> out(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplerParams p = params;
    p.seed += i;
    s.add(int32_t(i), p, {});
  }
  Batch b;
  for (size_t i = 0; i < prompts.size(); ++i)
    for (size_t at = 0; at < prompts[i].size(); at += size_t(s.max_step_entries())) {
      b.clear();
      const size_t end = std::min(prompts[i].size(), at + size_t(s.max_step_entries()));
      for (size_t k = at; k < end; ++k) b.add(int32_t(i), int32_t(k), prompts[i][k], k + 1 == prompts[i].size());
      for (const auto& t : s.step(b)) out[size_t(t.slot)].push_back(t.token);
    }
  for (int k = 1; k < n; ++k) {
    b.clear();
    for (size_t i = 0; i < prompts.size(); ++i)
      b.add(int32_t(i), int32_t(prompts[i].size() + out[i].size() - 1), out[i].back(), true);
    for (const auto& t : s.step(b)) out[size_t(t.slot)].push_back(t.token);
  }
  for (size_t i = 0; i < prompts.size(); ++i) s.free(int32_t(i));
  return out;
}

}  // namespace shardlm::parallel::testing
