// qwen2: biases on the Q, K and V projections, NeoX RoPE.
#include "model/arch_registry.h"

namespace shardlm::arch {

void load_qwen2(const ArchKeys& keys, ModelConfig& c) {
  read_transformer(keys, c);
  c.rope.style = RopeStyle::NeoxHalves;
  c.attention.qkv_bias = true;
}

}  // namespace shardlm::arch
