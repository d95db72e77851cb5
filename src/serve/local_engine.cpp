#include "serve/local_engine.h"

#include <fmt/format.h>

#include "core/error.h"

namespace shardlm::serve {

LocalEngine::LocalEngine(const gguf::File& file, ModelOptions options)
    : model_(file, std::move(options)), samplers_(size_t(model_.options().n_seq)) {}

void LocalEngine::check_slot(SlotId slot, const char* what) const {
  if (slot < 0 || slot >= n_slots()) throw Error(fmt::format("engine {}: slot {} is outside [0, {})", what, slot, n_slots()));
}

void LocalEngine::add(SlotId slot, const SamplerParams& params, std::span<const TokenId> kept_prefix) {
  check_slot(slot, "add");
  if (samplers_[size_t(slot)]) throw Error(fmt::format("engine add: slot {} is already live", slot));
  if (int64_t(kept_prefix.size()) >= n_ctx())
    throw Error(fmt::format("engine add: kept prefix of {} tokens fills the context of {}", kept_prefix.size(), n_ctx()));
  auto& sampler = samplers_[size_t(slot)].emplace(params, n_vocab());
  for (const TokenId t : kept_prefix) sampler.accept(t);
}

void LocalEngine::free(SlotId slot) {
  check_slot(slot, "free");
  samplers_[size_t(slot)].reset();
}

std::vector<SampledToken> LocalEngine::step(std::span<const StepEntry> entries) {
  batch_.clear();
  for (const auto& e : entries) {
    check_slot(e.slot, "step");
    if (!samplers_[size_t(e.slot)]) throw Error(fmt::format("engine step: slot {} is not live", e.slot));
    batch_.add(e.slot, e.pos, e.token, e.sample);
  }
  model_.forward(batch_);  // checks positions, tokens and the number of outputs
  std::vector<SampledToken> out;
  size_t k = 0;
  for (const auto& e : entries) {
    auto& sampler = *samplers_[size_t(e.slot)];
    sampler.accept(e.token);
    if (!e.sample) continue;
    SampledToken& t = out.emplace_back();
    t.slot = e.slot;
    if (sampler.params().logprobs >= 0) t.logprobs.emplace();
    t.token = sampler.sample(model_.logits(k++), t.logprobs ? &*t.logprobs : nullptr);
  }
  return out;
}

}  // namespace shardlm::serve
