// Hyper-parameters of a decoder-only transformer, read from GGUF metadata.
// Supported: general.architecture = llama (Llama 2/3/3.x, TinyLlama,
// Mistral-style), qwen2 (q/k/v biases) and qwen3 (per-head q/k RMSNorm).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardlm::gguf { class File; }

namespace shardlm {

enum class Arch { Llama, Qwen2, Qwen3 };

// Which elements RoPE rotates together: llama.cpp's "normal" mode pairs
// (x[2i], x[2i+1]); NeoX mode pairs (x[i], x[i + n_rot/2]).
enum class RopeStyle { AdjacentPairs, NeoxHalves };

struct ModelConfig {
  Arch arch = Arch::Llama;
  std::string arch_name;
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim_k = 0;  // key_length: may differ from n_embd / n_head (qwen3)
  int64_t head_dim_v = 0;  // value_length
  int64_t n_ff = 0;
  int64_t n_ctx_train = 0;
  float rms_eps = 1e-5f;

  int64_t rope_dims = 0;  // leading dimensions of each head that are rotated
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // linear context scaling: θ multiplied by this
  RopeStyle rope_style = RopeStyle::AdjacentPairs;
  bool rope_has_freq_factors = false;  // Llama-3.1: θ_i divided by rope_freqs.weight[i]

  bool has_qkv_bias = false;  // qwen2
  bool has_qk_norm = false;   // qwen3
  bool tied_output = false;   // no output.weight: logits use token_embd

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
