#include <array>
#include <fmt/format.h>

#include "cli/synth.h"
#include "core/error.h"

namespace shardlm::cli::synth {
namespace {

// Shapes of the real models (their config.json), so that memory, speed and
// partitioning behave as they would with the real weights. The tiny-* ones
// are test shapes for each architecture's features.
const MoeShape kDeepseekV3Routing{.n_expert = 256, .n_used = 8, .n_ff_expert = 2048, .n_shared = 1,
                                  .n_leading_dense = 3, .n_group = 8, .n_group_used = 4, .gating_func = 2,
                                  .selection_bias = true, .weights_norm = true, .weights_scale = 2.5f};
const MlaShape kDeepseekV3Attention{.q_lora = 1536, .kv_lora = 512, .qk_nope = 128, .qk_rope = 64, .v_dim = 128};

const std::array<Preset, 13> kPresets = {{
    {.name = "tiny", .arch = "llama", .n_layer = 2, .n_embd = 256, .n_ff = 768, .n_head = 8, .n_head_kv = 2,
     .head_dim = 32, .n_vocab = 512, .n_ctx = 2048},
    {.name = "llama3.2-1b", .arch = "llama", .n_layer = 16, .n_embd = 2048, .n_ff = 8192, .n_head = 32,
     .n_head_kv = 8, .head_dim = 64, .n_vocab = 128256, .n_ctx = 131072, .tied_embeddings = true,
     .rope_base = 500000.0},
    {.name = "llama3.1-8b", .arch = "llama", .n_layer = 32, .n_embd = 4096, .n_ff = 14336, .n_head = 32,
     .n_head_kv = 8, .head_dim = 128, .n_vocab = 128256, .n_ctx = 131072, .rope_base = 500000.0},
    {.name = "qwen3-0.6b", .arch = "qwen3", .n_layer = 28, .n_embd = 1024, .n_ff = 3072, .n_head = 16,
     .n_head_kv = 8, .head_dim = 128, .n_vocab = 151936, .n_ctx = 40960, .tied_embeddings = true, .qk_norm = true,
     .rope_base = 1000000.0, .rms_eps = 1e-6f, .pre_tokenizer = "qwen2", .add_bos = false},
    {.name = "mixtral-8x7b", .arch = "llama", .n_layer = 32, .n_embd = 4096, .n_ff = 14336, .n_head = 32,
     .n_head_kv = 8, .head_dim = 128, .n_vocab = 32000, .n_ctx = 32768, .rope_base = 1000000.0,
     .moe = {.n_expert = 8, .n_used = 2, .n_ff_expert = 14336}},
    {.name = "qwen3-30b-a3b", .arch = "qwen3moe", .n_layer = 48, .n_embd = 2048, .n_ff = 6144, .n_head = 32,
     .n_head_kv = 4, .head_dim = 128, .n_vocab = 151936, .n_ctx = 40960, .qk_norm = true, .rope_base = 1000000.0,
     .rms_eps = 1e-6f, .pre_tokenizer = "qwen2", .add_bos = false,
     .moe = {.n_expert = 128, .n_used = 8, .n_ff_expert = 768, .weights_norm = true}},
    {.name = "deepseek-v3", .arch = "deepseek2", .n_layer = 61, .n_embd = 7168, .n_ff = 18432, .n_head = 128,
     .n_head_kv = 128, .n_vocab = 129280, .n_ctx = 163840, .rms_eps = 1e-6f, .moe = kDeepseekV3Routing,
     .mla = kDeepseekV3Attention, .yarn = {.factor = 40, .orig_ctx = 4096, .log_multiplier = 0.1f}},
    {.name = "kimi-k2", .arch = "deepseek2", .n_layer = 61, .n_embd = 7168, .n_ff = 18432, .n_head = 64,
     .n_head_kv = 64, .n_vocab = 163840, .n_ctx = 131072, .rope_base = 50000.0, .rms_eps = 1e-6f,
     .moe = {.n_expert = 384, .n_used = 8, .n_ff_expert = 2048, .n_shared = 1, .n_leading_dense = 1,
             .n_group = 1, .n_group_used = 1, .gating_func = 2, .selection_bias = true, .weights_norm = true,
             .weights_scale = 2.827f},
     .mla = kDeepseekV3Attention, .yarn = {.factor = 32, .orig_ctx = 4096, .log_multiplier = 0.1f}},
    // Test shapes: every feature of the architectures above at a few hundred kB.
    {.name = "tiny-mixtral", .arch = "llama", .n_layer = 2, .n_embd = 64, .n_ff = 64, .n_head = 4, .n_head_kv = 2,
     .head_dim = 16, .n_vocab = 512, .n_ctx = 4096, .moe = {.n_expert = 4, .n_used = 2, .n_ff_expert = 64}},
    {.name = "tiny-qwen3moe", .arch = "qwen3moe", .n_layer = 2, .n_embd = 64, .n_ff = 64, .n_head = 4,
     .n_head_kv = 2, .head_dim = 32, .n_vocab = 512, .n_ctx = 4096, .qk_norm = true, .rope_base = 1000000.0,
     .rms_eps = 1e-6f, .moe = {.n_expert = 8, .n_used = 3, .n_ff_expert = 32, .weights_norm = false}},
    {.name = "tiny-deepseek3", .arch = "deepseek2", .n_layer = 3, .n_embd = 64, .n_ff = 64, .n_head = 4,
     .n_head_kv = 4, .n_vocab = 512, .n_ctx = 163840, .rms_eps = 1e-6f,
     .moe = {.n_expert = 8, .n_used = 2, .n_ff_expert = 32, .n_shared = 1, .n_leading_dense = 1, .n_group = 4,
             .n_group_used = 2, .gating_func = 2, .selection_bias = true, .weights_norm = true, .weights_scale = 2.5f},
     .mla = {.q_lora = 32, .kv_lora = 32, .qk_nope = 32, .qk_rope = 16, .v_dim = 32},
     .yarn = {.factor = 40, .orig_ctx = 4096, .log_multiplier = 0.1f}},
    // Wider than the row slices the expert phases split into (model_experts.cpp).
    {.name = "small-qwen3moe", .arch = "qwen3moe", .n_layer = 2, .n_embd = 256, .n_ff = 256, .n_head = 4,
     .n_head_kv = 2, .head_dim = 64, .n_vocab = 512, .n_ctx = 4096, .qk_norm = true, .rope_base = 1000000.0,
     .rms_eps = 1e-6f, .moe = {.n_expert = 8, .n_used = 4, .n_ff_expert = 160, .weights_norm = true}},
    // DeepSeek-V2-Lite's features: plain Q, one attn_kv_b, softmax gating, no groups.
    {.name = "tiny-deepseek2-lite", .arch = "deepseek2", .n_layer = 2, .n_embd = 64, .n_ff = 64, .n_head = 4,
     .n_head_kv = 4, .n_vocab = 512, .n_ctx = 4096, .rms_eps = 1e-6f,
     .moe = {.n_expert = 8, .n_used = 3, .n_ff_expert = 32, .n_shared = 2, .n_leading_dense = 1,
             .gating_func = 1, .weights_scale = 1.0f},
     .mla = {.kv_lora = 32, .qk_nope = 32, .qk_rope = 16, .v_dim = 32, .joined_kv_b = true}},
}};

}  // namespace

std::string preset_names() {
  std::string s;
  for (const auto& p : kPresets) s += (s.empty() ? "" : ", ") + p.name;
  return s;
}

const Preset& find_preset(const std::string& name) {
  for (const auto& p : kPresets)
    if (p.name == name) return p;
  throw Error(fmt::format("--preset: '{}' is unknown (known: {})", name, preset_names()));
}

}  // namespace shardlm::cli::synth
