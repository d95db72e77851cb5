#include "serve/prefix_slots.h"

#include <algorithm>

namespace shardlm::serve {

PrefixSlots::PrefixSlots(int n_slots) : slots_(size_t(n_slots)) {}

int PrefixSlots::n_free() const {
  return int(std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.live; }));
}

std::optional<SlotChoice> PrefixSlots::acquire(std::span<const TokenId> prompt) {
  const size_t limit = prompt.empty() ? 0 : prompt.size() - 1;
  std::optional<SlotChoice> best;
  uint64_t best_used = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (s.live) continue;
    const size_t n = std::min(limit, s.tokens.size());
    const auto common = size_t(std::mismatch(prompt.begin(), prompt.begin() + ptrdiff_t(n), s.tokens.begin()).first -
                               prompt.begin());
    if (!best || int64_t(common) > best->reused || (int64_t(common) == best->reused && s.last_used < best_used)) {
      best = SlotChoice{SlotId(i), int64_t(common)};
      best_used = s.last_used;
    }
  }
  if (best) {
    Slot& s = slots_[size_t(best->slot)];
    s.live = true;
    s.last_used = ++clock_;
    s.tokens.resize(size_t(best->reused));
  }
  return best;
}

void PrefixSlots::record(SlotId slot, int32_t pos, TokenId token) {
  auto& tokens = slots_[size_t(slot)].tokens;
  tokens.resize(size_t(pos));  // the model requires positions in order, so pos <= size
  tokens.push_back(token);
}

void PrefixSlots::release(SlotId slot) {
  slots_[size_t(slot)].live = false;
  slots_[size_t(slot)].last_used = ++clock_;
}

}  // namespace shardlm::serve
