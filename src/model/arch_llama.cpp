// llama: Llama 2/3/3.x, TinyLlama, Mistral, and Mixtral (llama.expert_count
// set): adjacent-pair RoPE; experts chosen by softmax, the top-k weights
// renormalised (softmax over the chosen).
#include "model/arch_registry.h"

namespace shardlm::arch {

void load_llama(const ArchKeys& keys, ModelConfig& c) {
  read_transformer(keys, c);
  c.rope.style = RopeStyle::AdjacentPairs;
  read_experts(keys, c);
  c.moe.weights_norm = true;
}

}  // namespace shardlm::arch
