// Hyper-parameters of a decoder-only transformer, read from GGUF metadata.
// Each architecture (general.architecture) has its own loader in
// model/arch_<name>.cpp that fills the parts below it uses; the forward pass
// reads only these descriptions, never the architecture's name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/ops.h"

namespace shardlm::gguf { class File; }

namespace shardlm {

using ops::RopeStyle;

struct RopeSpec {
  int64_t dims = 0;  // leading dimensions of each head (or of the RoPE part, MLA) that are rotated
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;  // 1 / context scaling factor
  RopeStyle style = RopeStyle::AdjacentPairs;
  bool has_freq_factors = false;  // Llama-3.1: θ_i divided by rope_freqs.weight[i]
  // YaRN (rope.scaling.type = yarn): pairs below the correction range keep
  // their original frequency, pairs above are interpolated by freq_scale.
  bool yarn = false;
  int64_t yarn_orig_ctx = 0;
  float yarn_beta_fast = 32.0f, yarn_beta_slow = 1.0f;
  float yarn_attn_factor = 1.0f;  // rope.scaling.attn_factor
  float yarn_log_multiplier = 0.0f;  // DeepSeek's mscale_all_dim · 0.1, folded into the attention scale
};

// Multi-head latent attention (DeepSeek-V2/V3): K and V are up-projected from a
// per-token latent of kv_lora_rank values shared by all heads.
struct LatentAttentionSpec {
  int64_t q_lora_rank = 0;  // 0: Q is one plain projection (attn_q)
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_dim = 0;  // per head, without RoPE
  int64_t qk_rope_dim = 0;  // per head, roped; its key part is shared by all heads
  int64_t v_dim = 0;        // per head
  bool joined_kv_b = false;  // older files: one attn_kv_b instead of attn_k_b / attn_v_b
  int64_t qk_dim() const { return qk_nope_dim + qk_rope_dim; }
};

struct AttentionSpec {
  enum class Kind { MultiHead, Latent };
  Kind kind = Kind::MultiHead;
  bool qkv_bias = false;  // qwen2: biases on the Q, K and V projections
  bool qk_norm = false;   // qwen3: per-head RMS norms of Q and K before RoPE
  LatentAttentionSpec latent;
};

enum class ExpertGating { Softmax, Sigmoid };

// Mixture-of-experts feed-forward layers. n_expert == 0: every layer is dense.
struct MoeSpec {
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;     // top-k per token
  int64_t n_ff_expert = 0;       // rows of each expert's gate/up
  int64_t n_shared = 0;          // always-on experts, one FFN of n_shared · n_ff_expert rows
  int64_t n_leading_dense = 0;   // layers [0, n) keep a dense FFN of n_ff rows
  ExpertGating gating = ExpertGating::Softmax;
  bool selection_bias = false;   // exp_probs_b: added to the scores for choosing, not for weighting
  bool weights_norm = false;     // chosen weights divided by their sum
  float weights_scale = 1.0f;    // then multiplied by this
  int64_t n_group = 1;           // experts in n_group consecutive groups, of which
  int64_t n_group_used = 1;      // only the best n_group_used are eligible
};

struct ModelConfig {
  std::string arch_name;
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim_k = 0;  // key_length: may differ from n_embd / n_head (qwen3); MLA: its cached row
  int64_t head_dim_v = 0;  // value_length
  int64_t n_ff = 0;        // dense FFN rows
  int64_t n_ctx_train = 0;
  float rms_eps = 1e-5f;
  bool tied_output = false;  // no output.weight: logits use token_embd

  RopeSpec rope;
  AttentionSpec attention;
  MoeSpec moe;

  bool has_experts() const { return moe.n_expert > 0; }
  bool layer_has_experts(int64_t layer) const { return has_experts() && layer >= moe.n_leading_dense; }
  bool latent_attention() const { return attention.kind == AttentionSpec::Kind::Latent; }

  int64_t n_group() const { return n_head / n_head_kv; }  // query heads per KV head
  int64_t q_dim() const { return n_head * head_dim_k; }
  int64_t kv_dim_k() const { return n_head_kv * head_dim_k; }
  int64_t kv_dim_v() const { return n_head_kv * head_dim_v; }

  // Throws Error("<path>: ...") naming the missing key or the unsupported
  // architecture / feature.
  static ModelConfig from_gguf(const gguf::File& file);
  std::string summary() const;  // one line for logs
};

}  // namespace shardlm
