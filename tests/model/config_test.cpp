#include "model/config.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model_test_util.h"

namespace shardlm::test {
namespace {

ModelConfig config_of(const std::string& file) { return ModelConfig::from_gguf(*gguf::File::open(model_path(file))); }

std::string error_of(const std::string& file) {
  try {
    config_of(file);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfig, Stories260K) {
  const auto c = config_of("stories260K.gguf");
  EXPECT_EQ(c.arch_name, "llama");
  EXPECT_EQ(c.n_layer, 5);
  EXPECT_EQ(c.n_embd, 64);
  EXPECT_EQ(c.n_head, 8);
  EXPECT_EQ(c.n_head_kv, 4);
  EXPECT_EQ(c.head_dim_k, 8);
  EXPECT_EQ(c.n_ff, 172);
  EXPECT_EQ(c.n_vocab, 512);
  EXPECT_EQ(c.rope.dims, 8);
  EXPECT_FLOAT_EQ(c.rope.freq_base, 10000.0f);  // key absent: the default
  EXPECT_EQ(c.rope.style, RopeStyle::AdjacentPairs);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
  EXPECT_FALSE(c.tied_output);
  EXPECT_FALSE(c.attention.qkv_bias || c.attention.qk_norm || c.rope.has_freq_factors || c.rope.yarn);
  EXPECT_FALSE(c.has_experts() || c.latent_attention());
}

TEST(ModelConfig, Qwen2HasBiasesNeoxRopeAndTiedOutput) {
  const auto c = config_of("tiny-random-qwen2.gguf");
  EXPECT_EQ(c.arch_name, "qwen2");
  EXPECT_TRUE(c.attention.qkv_bias);
  EXPECT_TRUE(c.tied_output);
  EXPECT_EQ(c.rope.style, RopeStyle::NeoxHalves);
  EXPECT_FLOAT_EQ(c.rope.freq_base, 1e6f);
  EXPECT_EQ(c.head_dim_k, 16);
}

TEST(ModelConfig, Qwen3HeadDimComesFromKeyLength) {
  const auto c = config_of("tiny-random-qwen3.gguf");
  EXPECT_EQ(c.arch_name, "qwen3");
  EXPECT_TRUE(c.attention.qk_norm);
  EXPECT_EQ(c.n_embd, 64);
  EXPECT_EQ(c.head_dim_k, 32);  // not 64 / 4
  EXPECT_EQ(c.q_dim(), 128);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-6f);
}

TEST(ModelConfig, Llama31UsesRopeFrequencyFactors) {
  const auto c = config_of("tiny-random-llama31.gguf");
  EXPECT_TRUE(c.rope.has_freq_factors);
  EXPECT_FLOAT_EQ(c.rope.freq_base, 500000.0f);
  EXPECT_EQ(c.n_ctx_train, 131072);
  EXPECT_EQ(c.n_group(), 4);
}

TEST(ModelConfig, TiedEmbeddingsWithoutOutputWeight) {
  EXPECT_TRUE(config_of("tiny-random-llama-bpe.gguf").tied_output);
}

TEST(ModelConfig, MixtralIsLlamaWithExperts) {
  const auto c = config_of("tiny-random-mixtral.gguf");
  EXPECT_EQ(c.arch_name, "llama");
  EXPECT_EQ(c.moe.n_expert, 4);
  EXPECT_EQ(c.moe.n_expert_used, 2);
  EXPECT_EQ(c.moe.n_ff_expert, 128);  // feed_forward_length: no expert_feed_forward_length key
  EXPECT_TRUE(c.moe.weights_norm);
  EXPECT_EQ(c.moe.gating, ExpertGating::Softmax);
  EXPECT_TRUE(c.layer_has_experts(0));
}

TEST(ModelConfig, Qwen3MoeExpertWidthAndQkNorm) {
  const auto c = config_of("tiny-random-qwen3moe.gguf");
  EXPECT_TRUE(c.attention.qk_norm);
  EXPECT_EQ(c.moe.n_expert, 8);
  EXPECT_EQ(c.moe.n_ff_expert, 64);
  EXPECT_EQ(c.moe.n_shared, 0);
  EXPECT_TRUE(c.moe.weights_norm);
}

TEST(ModelConfig, Deepseek2LatentAttentionRoutingAndYarn) {
  const auto c = config_of("tiny-random-deepseek2.gguf");
  ASSERT_TRUE(c.latent_attention());
  const auto& a = c.attention.latent;
  EXPECT_EQ(a.q_lora_rank, 32);
  EXPECT_EQ(a.kv_lora_rank, 32);
  EXPECT_EQ(a.qk_nope_dim, 16);
  EXPECT_EQ(a.qk_rope_dim, 8);
  EXPECT_EQ(a.v_dim, 16);
  EXPECT_FALSE(a.joined_kv_b);
  EXPECT_EQ(c.head_dim_k, 40);  // the cached row: latent + roped key
  EXPECT_EQ(c.n_head_kv, 1);
  const auto& m = c.moe;
  EXPECT_EQ(m.n_expert, 8);
  EXPECT_EQ(m.n_shared, 1);
  EXPECT_EQ(m.n_leading_dense, 1);
  EXPECT_EQ(m.gating, ExpertGating::Sigmoid);
  EXPECT_TRUE(m.selection_bias && m.weights_norm);
  EXPECT_FLOAT_EQ(m.weights_scale, 2.5f);
  EXPECT_EQ(m.n_group, 4);
  EXPECT_EQ(m.n_group_used, 2);
  EXPECT_FALSE(c.layer_has_experts(0));
  EXPECT_TRUE(c.layer_has_experts(1));
  EXPECT_TRUE(c.rope.yarn);
  EXPECT_FLOAT_EQ(c.rope.freq_scale, 1.0f / 40);
  EXPECT_EQ(c.rope.yarn_orig_ctx, 4096);
  EXPECT_FLOAT_EQ(c.rope.yarn_log_multiplier, 0.1f);
}

TEST(ModelConfig, RejectsUnsupportedArchitecturesNamingFileAndKey) {
  const std::string e = error_of("vocab/ggml-vocab-gpt-2.gguf");
  EXPECT_NE(e.find("ggml-vocab-gpt-2.gguf"), std::string::npos) << e;
  EXPECT_NE(e.find("unsupported architecture 'gpt2'"), std::string::npos) << e;
  EXPECT_NE(e.find("general.architecture"), std::string::npos) << e;
  EXPECT_NE(e.find("deepseek2"), std::string::npos) << e;  // the list of supported ones
}

TEST(ModelConfig, RejectsVocabularyOnlyFiles) {
  const std::string e = error_of("vocab/ggml-vocab-gpt-2.gguf");
  EXPECT_NE(e.find("unsupported architecture 'gpt2'"), std::string::npos) << e;
  // A llama vocabulary file has the keys but no tensors.
  const std::string e2 = error_of("vocab/ggml-vocab-llama-spm.gguf");
  EXPECT_NE(e2.find("token_embd.weight"), std::string::npos) << e2;
}

}  // namespace
}  // namespace shardlm::test
