#include "serve/session_engine.h"

namespace shardlm::serve {
namespace {

Batch to_batch(std::span<const StepEntry> entries) {
  Batch b;
  b.entries.reserve(entries.size());
  for (const StepEntry& e : entries) b.add(e.slot, e.pos, e.token, e.sample);
  return b;
}

}  // namespace

parallel::StepMessage step_message(parallel::StepBuilder& builder, std::span<const StepEntry> entries) {
  return builder.take(parallel::StepKind::Step, to_batch(entries));
}

std::vector<SampledToken> sampled_tokens(std::vector<parallel::SlotToken> tokens) {
  std::vector<SampledToken> out;
  out.reserve(tokens.size());
  for (auto& t : tokens) out.push_back({t.slot, t.token, std::move(t.logprobs)});
  return out;
}

std::vector<SampledToken> SessionEngine::step(std::span<const StepEntry> entries) {
  return sampled_tokens(s_.step(to_batch(entries)));
}

}  // namespace shardlm::serve
