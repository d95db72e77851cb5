// deepseek2 (DeepSeek-V2/V3/R1, Kimi-K2): multi-head latent attention and
// mixture-of-experts layers after leading_dense_block_count dense ones, with
// shared experts, softmax or sigmoid gating, a selection bias, group-limited
// routing and scaled weights.
#include <fmt/format.h>

#include "gguf/gguf.h"
#include "model/arch_registry.h"

namespace shardlm::arch {
namespace {

void read_latent_attention(const ArchKeys& keys, ModelConfig& c) {
  auto& a = c.attention;
  auto& lat = a.latent;
  a.kind = AttentionSpec::Kind::Latent;
  lat.q_lora_rank = keys.count_or_zero("attention.q_lora_rank");
  lat.kv_lora_rank = keys.require_count("attention.kv_lora_rank");
  // Files converted for the split attn_k_b / attn_v_b form describe the cache
  // as one MQA head (key_length = kv_lora_rank + rope) and carry the per-head
  // sizes in *_mla keys; older files have per-head sizes in key/value_length.
  const int64_t qk = keys.count_or("attention.key_length_mla", c.head_dim_k);
  lat.v_dim = keys.count_or("attention.value_length_mla", c.head_dim_v);
  lat.qk_rope_dim = c.rope.dims;
  lat.qk_nope_dim = qk - c.rope.dims;
  if (lat.qk_nope_dim <= 0)
    keys.fail("attention.key_length_mla", fmt::format("= {} leaves no dimensions beside the {} roped ones", qk, c.rope.dims));
  lat.joined_kv_b = keys.file().find_tensor("blk.0.attn_kv_b.weight") != nullptr;
  // What the cache holds per token: the latent and the shared roped key.
  c.n_head_kv = 1;
  c.head_dim_k = lat.kv_lora_rank + lat.qk_rope_dim;
  c.head_dim_v = lat.kv_lora_rank;
}

void read_routing(const ArchKeys& keys, ModelConfig& c) {
  auto& m = c.moe;
  m.n_shared = keys.count_or_zero("expert_shared_count");
  m.n_leading_dense = keys.count_or_zero("leading_dense_block_count");
  if (m.n_leading_dense > c.n_layer)
    keys.fail("leading_dense_block_count", fmt::format("= {} exceeds block_count {}", m.n_leading_dense, c.n_layer));
  // 1 = softmax, 2 = sigmoid; DeepSeek-V2 files predate the key and use softmax.
  switch (keys.count_or("expert_gating_func", 1)) {
    case 1: m.gating = ExpertGating::Softmax; break;
    case 2: m.gating = ExpertGating::Sigmoid; break;
    default: keys.fail("expert_gating_func", "is not 1 (softmax) or 2 (sigmoid)");
  }
  m.weights_norm = keys.flag_or("expert_weights_norm", false);
  m.weights_scale = float(keys.real_or("expert_weights_scale", 1.0));
  if (!(m.weights_scale > 0 && m.weights_scale < 1e6)) keys.fail("expert_weights_scale", "is not a positive scale");
  m.n_group = keys.count_or("expert_group_count", 1);
  m.n_group_used = keys.count_or("expert_group_used_count", m.n_group);
  if (m.n_expert % m.n_group != 0) keys.fail("expert_group_count", "does not divide expert_count");
  if (m.n_group_used > m.n_group) keys.fail("expert_group_used_count", "exceeds expert_group_count");
  if (m.n_expert_used > m.n_group_used * (m.n_expert / m.n_group))
    keys.fail("expert_used_count", "exceeds the experts of the used groups");
  const auto first_moe = fmt::format("blk.{}.exp_probs_b.bias", m.n_leading_dense);
  m.selection_bias = keys.file().find_tensor(first_moe) != nullptr;
}

}  // namespace

void load_deepseek2(const ArchKeys& keys, ModelConfig& c) {
  read_transformer(keys, c);
  c.rope.style = RopeStyle::AdjacentPairs;
  read_latent_attention(keys, c);
  read_experts(keys, c);
  if (c.has_experts()) read_routing(keys, c);
}

}  // namespace shardlm::arch
