// Which KV slot a new sequence gets. Every slot remembers the tokens whose
// keys and values it holds (positions 0..n-1); a freed slot keeps them, so a
// request that starts with the same tokens (a chat resending its history)
// takes that slot and skips recomputing the common prefix.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "serve/engine.h"

namespace shardlm::serve {

struct SlotChoice {
  SlotId slot = 0;
  int64_t reused = 0;  // leading prompt tokens already in the slot's cache
};

class PrefixSlots {
 public:
  explicit PrefixSlots(int n_slots);

  int n_free() const;
  int n_live() const { return int(slots_.size()) - n_free(); }
  // The free slot sharing the longest prefix with `prompt` (at most
  // prompt.size()-1 tokens, so the last one is evaluated for its logits);
  // among equals the least recently used. Marks it live and forgets its
  // history past the reused prefix. Nullopt when every slot is live.
  std::optional<SlotChoice> acquire(std::span<const TokenId> prompt);
  // The slot now holds `token` at `pos` (positions after it are stale).
  void record(SlotId slot, int32_t pos, TokenId token);
  void release(SlotId slot);
  void forget(SlotId slot) { slots_[size_t(slot)].tokens.clear(); }  // its cache can no longer be trusted
  std::span<const TokenId> history(SlotId slot) const { return slots_[size_t(slot)].tokens; }

 private:
  struct Slot {
    std::vector<TokenId> tokens;
    bool live = false;
    uint64_t last_used = 0;
  };
  std::vector<Slot> slots_;
  uint64_t clock_ = 0;
};

}  // namespace shardlm::serve
