// The unit of work behind the scheduler: one step over entries of any number of
// live sequences (prompt chunks and decode tokens mixed). Every sequence has
// its own sampling parameters and sampling happens on the engine's side, so a
// cluster engine can keep sampling next to its vocabulary shards and send back
// only token ids (and the log-probabilities a sequence asks for). A sequence
// lives in one KV slot from add() to free().
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/sampler.h"
#include "tokenizer/tokenizer.h"

namespace shardlm::serve {

using SlotId = int32_t;

struct StepEntry {
  SlotId slot = 0;
  int32_t pos = 0;      // follows positions 0..pos-1 of the slot already in the cache or earlier in the step
  TokenId token = 0;
  bool sample = false;  // sample the slot's next token from this entry's logits
};

struct SampledToken {
  SlotId slot = 0;
  TokenId token = 0;
  std::optional<SampledLogprobs> logprobs;  // when the slot's SamplerParams::logprobs >= 0
};

class Engine {
 public:
  virtual ~Engine() = default;

  virtual int n_slots() const = 0;
  virtual int64_t n_ctx() const = 0;           // positions per slot
  virtual int64_t max_step_entries() const = 0;
  virtual int64_t n_vocab() const = 0;

  // Starts a sequence in a free slot whose cache still holds `kept_prefix`
  // at positions 0..kept_prefix.size()-1 (reused from the slot's previous
  // sequence; empty for none). The kept tokens count as seen for penalties.
  virtual void add(SlotId slot, const SamplerParams& params, std::span<const TokenId> kept_prefix) = 0;
  virtual void free(SlotId slot) = 0;

  // Runs one step; returns one token per entry with sample=true, in entry order.
  // At most one sampling entry per slot; entries' slots must be live.
  virtual std::vector<SampledToken> step(std::span<const StepEntry> entries) = 0;

  // Empty while the engine can run steps; otherwise why not (a cluster
  // engine whose worker died names it). Called from any thread.
  virtual std::string health() const { return {}; }
  // The cluster nodes the engine runs on now; empty on one machine. Called from any thread.
  virtual std::vector<std::string> nodes() const { return {}; }
  // Called before admitting requests while health() is not empty: a cluster
  // engine forms its job again (the node may be back). True when it did, and
  // so every slot's cache is empty now. Not thread-safe with step().
  virtual bool recover() { return false; }
};

}  // namespace shardlm::serve
