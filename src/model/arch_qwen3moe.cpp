// qwen3moe (Qwen3-30B-A3B, Qwen3-235B-A22B): qwen3 attention; every layer is
// a mixture of experts (top-k of expert_count, softmax over all experts, the
// chosen weights renormalised unless expert_weights_norm says false), no
// shared expert.
#include "model/arch_registry.h"

namespace shardlm::arch {

void load_qwen3moe(const ArchKeys& keys, ModelConfig& c) {
  load_qwen3(keys, c);
  read_experts(keys, c);
  if (!c.has_experts()) keys.fail("expert_count", "is missing or 0");
  c.moe.weights_norm = keys.flag_or("expert_weights_norm", true);
}

}  // namespace shardlm::arch
