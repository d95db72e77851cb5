// Pieces of `shardlm synth`: architecture presets and tokenizer metadata for
// random-weight models of real shapes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace shardlm::cli::synth {

// Mixture-of-experts FFN layers (n_expert == 0: dense model).
struct MoeShape {
  int64_t n_expert = 0, n_used = 0, n_ff_expert = 0;
  int64_t n_shared = 0;         // shared experts (deepseek2)
  int64_t n_leading_dense = 0;  // deepseek2: first layers keep a dense FFN
  int64_t n_group = 0, n_group_used = 0;  // 0: no group keys written
  uint32_t gating_func = 0;     // deepseek2: 1 softmax, 2 sigmoid; 0: key not written
  bool selection_bias = false;  // exp_probs_b
  bool weights_norm = false;
  float weights_scale = 0;      // 0: key not written
};

// Multi-head latent attention (deepseek2); kv_lora == 0: ordinary attention.
struct MlaShape {
  int64_t q_lora = 0;  // 0: plain attn_q
  int64_t kv_lora = 0, qk_nope = 0, qk_rope = 0, v_dim = 0;
  bool joined_kv_b = false;  // older converters' single attn_kv_b
};

struct YarnShape {
  double factor = 0;  // 0: no RoPE scaling
  int64_t orig_ctx = 0;
  float log_multiplier = 0;
};

struct Preset {
  std::string name, arch;
  int64_t n_layer = 0, n_embd = 0, n_ff = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_vocab = 0, n_ctx = 0;
  bool tied_embeddings = false;
  bool qk_norm = false;  // per-head RMS norms on Q and K (qwen3)
  double rope_base = 10000.0;
  float rms_eps = 1e-5f;
  std::string pre_tokenizer = "llama-bpe";
  bool add_bos = true;
  MoeShape moe{};
  MlaShape mla{};
  YarnShape yarn{};
};

struct Options {
  std::string preset, type = "f16", output, vocab_from;
  uint64_t seed = 1;
  int threads = 2;
  int64_t layers = 0;    // 0: the preset's
  bool weights = true;   // false: the tensor data is a hole (sparse file of the full size)
};

// Writes the GGUF `o` describes. Throws UsageError for a bad preset, type or
// layer count.
void write_model(const Options& o);

const Preset& find_preset(const std::string& name);  // throws Error listing the presets
std::string preset_names();

// A valid `gpt2`-kind vocabulary of n_vocab tokens: the 256 byte tokens in
// GPT-2's byte-to-unicode form, generated merge tokens with a matching merge
// list, then BOS and EOS control tokens (the last two ids).
void set_generated_vocab(gguf::Writer& w, const Preset& p, int64_t n_vocab, uint64_t seed);
// Every `tokenizer.*` key of `from`; returns its vocabulary size.
int64_t copy_vocab(gguf::Writer& w, const gguf::File& from);

}  // namespace shardlm::cli::synth
