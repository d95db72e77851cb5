// Pieces of `shardlm synth`: architecture presets and tokenizer metadata for
// random-weight models of real shapes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace shardlm::cli::synth {

struct Preset {
  std::string name, arch;
  int64_t n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab, n_ctx;
  bool tied_embeddings;
  bool qk_norm;  // per-head RMS norms on Q and K (qwen3)
  double rope_base;
  float rms_eps;
  std::string pre_tokenizer;
  bool add_bos;
};

const Preset& find_preset(const std::string& name);  // throws Error listing the presets
std::string preset_names();

// A valid `gpt2`-kind vocabulary of n_vocab tokens: the 256 byte tokens in
// GPT-2's byte-to-unicode form, generated merge tokens with a matching merge
// list, then BOS and EOS control tokens (the last two ids).
void set_generated_vocab(gguf::Writer& w, const Preset& p, int64_t n_vocab, uint64_t seed);
// Every `tokenizer.*` key of `from`; returns its vocabulary size.
int64_t copy_vocab(gguf::Writer& w, const gguf::File& from);

}  // namespace shardlm::cli::synth
