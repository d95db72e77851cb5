// qwen3: per-head RMS norms of Q and K before RoPE, NeoX RoPE; the head
// dimension comes from key_length (q dim may differ from n_embd).
#include "model/arch_registry.h"

namespace shardlm::arch {

void load_qwen3(const ArchKeys& keys, ModelConfig& c) {
  read_transformer(keys, c);
  c.rope.style = RopeStyle::NeoxHalves;
  c.attention.qk_norm = true;
}

}  // namespace shardlm::arch
