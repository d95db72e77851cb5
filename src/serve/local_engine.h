// Engine on this machine: one Model whose KV cache has a slot per sequence,
// and one Sampler per live slot.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "model/model.h"
#include "serve/engine.h"

namespace shardlm::serve {

class LocalEngine final : public Engine {
 public:
  // options.n_seq is the number of slots; options.n_batch the most entries per step.
  LocalEngine(const gguf::File& file, ModelOptions options);

  int n_slots() const override { return int(model_.options().n_seq); }
  int64_t n_ctx() const override { return model_.options().n_ctx; }
  int64_t max_step_entries() const override { return model_.options().n_batch; }
  int64_t n_vocab() const override { return model_.config().n_vocab; }
  size_t kv_cache_bytes() const { return model_.kv_cache().bytes(); }

  void add(SlotId slot, const SamplerParams& params, std::span<const TokenId> kept_prefix) override;
  void free(SlotId slot) override;
  std::vector<SampledToken> step(std::span<const StepEntry> entries) override;

 private:
  void check_slot(SlotId slot, const char* what) const;

  Model model_;
  std::vector<std::optional<Sampler>> samplers_;  // engaged while the slot is live
  Batch batch_;
};

}  // namespace shardlm::serve
