// Feeding a prompt to a Model in batch-sized chunks (`shardlm bench -m`).
#pragma once

#include <cstdint>
#include <span>

#include "model/model.h"

namespace shardlm {

// Evaluates `tokens` of sequence `seq` at positions start_pos.. in chunks of
// the model's batch size; only the last token asks for logits (logits(0)).
void eval_prompt(Model& model, std::span<const TokenId> tokens, int32_t seq, int32_t start_pos);

}  // namespace shardlm
