#include "serve/prefill_pacer.h"

#include <algorithm>
#include <cmath>

namespace shardlm::serve {

namespace {
// Weight of the newest step in the running means: steps vary (attention grows
// with the context, the machine may be shared), a few steps settle it.
constexpr double kNewest = 0.2;

void mix(double& mean, double sample) { mean = mean == 0 ? sample : mean + kNewest * (sample - mean); }
}  // namespace

void PrefillPacer::observe(int64_t prompt_entries, int64_t decode_entries, double seconds) {
  if (ratio_ <= 1 || !(seconds > 0)) return;
  if (prompt_entries == 0) {
    if (decode_entries > 0) mix(decode_seconds_, seconds);
    return;
  }
  // The prompt tokens' share of the step: what it took beyond a decode-only step.
  if (decode_seconds_ > 0) mix(token_seconds_, std::max(seconds - decode_seconds_, 1e-9) / double(prompt_entries));
}

int64_t PrefillPacer::budget(int64_t n_decode, int64_t limit) const {
  limit = std::max<int64_t>(limit, 1);
  if (ratio_ <= 1 || n_decode == 0) return limit;
  if (decode_seconds_ == 0 || token_seconds_ == 0) return std::min(limit, kProbeTokens);
  const double fits = std::floor((ratio_ - 1) * decode_seconds_ / token_seconds_);
  return std::clamp<int64_t>(int64_t(std::min(fits, double(limit))), 1, limit);
}

}  // namespace shardlm::serve
