// Engine over a parallel::DistributedSession on its rank 0 (the other ranks
// run serve()): for engines whose ranks are processes of this program (bench
// dist, tests). On a cluster the coordinator drives through ClusterEngine.
#pragma once

#include "parallel/distributed_session.h"
#include "serve/engine.h"

namespace shardlm::serve {

// A serve::Engine step as the DistributedSession's Batch, and its tokens back.
parallel::StepMessage step_message(parallel::StepBuilder& builder, std::span<const StepEntry> entries);
std::vector<SampledToken> sampled_tokens(std::vector<parallel::SlotToken> tokens);

class SessionEngine final : public Engine {
 public:
  explicit SessionEngine(parallel::DistributedSession& session) : s_(session) {}

  int n_slots() const override { return int(s_.n_slots()); }
  int64_t n_ctx() const override { return s_.n_ctx(); }
  int64_t max_step_entries() const override { return s_.max_step_entries(); }
  int64_t n_vocab() const override { return s_.n_vocab(); }

  void add(SlotId slot, const SamplerParams& params, std::span<const TokenId> kept_prefix) override {
    s_.add(slot, params, kept_prefix);
  }
  void free(SlotId slot) override { s_.free(slot); }
  std::vector<SampledToken> step(std::span<const StepEntry> entries) override;

 private:
  parallel::DistributedSession& s_;
};

}  // namespace shardlm::serve
