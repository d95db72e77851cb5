// Helpers shared by `shardlm run` and `shardlm bench -m`: feeding a prompt in
// batch-sized chunks and reading the process's memory use.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>

#include "model/model.h"

namespace shardlm {

// Evaluates `tokens` of sequence `seq` at positions start_pos.. in chunks of
// the model's batch size; only the last token asks for logits (logits(0)).
// Returns false if `stop` became true between chunks.
bool eval_prompt(Model& model, std::span<const TokenId> tokens, int32_t seq, int32_t start_pos,
                 const std::atomic<bool>* stop = nullptr);

struct MemoryUsage {
  int64_t rss_kib = -1;  // VmRSS, -1 when /proc is unavailable
  int64_t hwm_kib = -1;  // VmHWM: the peak
};
MemoryUsage read_memory_usage();

}  // namespace shardlm
