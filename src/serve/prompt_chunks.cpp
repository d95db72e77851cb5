#include "serve/prompt_chunks.h"

#include <algorithm>

namespace shardlm::serve {

std::vector<int64_t> plan_prompt_chunks(std::span<const int64_t> remainders, int64_t budget, int64_t cohort_steps) {
  std::vector<int64_t> take(remainders.size(), 0);
  size_t cohort = 0;
  int64_t cohort_tokens = 0;
  if (cohort_steps > 0) {
    // The cohort's last tokens must fit in one step together.
    while (cohort < remainders.size() && int64_t(cohort) < budget &&
           cohort_tokens + remainders[cohort] <= cohort_steps * budget)
      cohort_tokens += remainders[cohort++];
  }
  const bool hold = cohort_tokens > budget;  // then, with at most budget members, it has tokens before its last ones
  int64_t left = budget;
  int64_t cohort_left = hold ? std::min(budget, cohort_tokens - budget) : budget;
  for (size_t i = 0; i < remainders.size() && left > 0; ++i) {
    const bool in_cohort = i < cohort;
    const int64_t want = remainders[i] - (hold && in_cohort ? 1 : 0);
    take[i] = std::min({want, left, in_cohort ? cohort_left : left});
    left -= take[i];
    if (in_cohort) cohort_left -= take[i];
  }
  return take;
}

}  // namespace shardlm::serve
