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
  EXPECT_EQ(c.arch, Arch::Llama);
  EXPECT_EQ(c.n_layer, 5);
  EXPECT_EQ(c.n_embd, 64);
  EXPECT_EQ(c.n_head, 8);
  EXPECT_EQ(c.n_head_kv, 4);
  EXPECT_EQ(c.head_dim_k, 8);
  EXPECT_EQ(c.n_ff, 172);
  EXPECT_EQ(c.n_vocab, 512);
  EXPECT_EQ(c.rope_dims, 8);
  EXPECT_FLOAT_EQ(c.rope_freq_base, 10000.0f);  // key absent: the default
  EXPECT_EQ(c.rope_style, RopeStyle::AdjacentPairs);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
  EXPECT_FALSE(c.tied_output);
  EXPECT_FALSE(c.has_qkv_bias || c.has_qk_norm || c.rope_has_freq_factors);
}

TEST(ModelConfig, Qwen2HasBiasesNeoxRopeAndTiedOutput) {
  const auto c = config_of("tiny-random-qwen2.gguf");
  EXPECT_EQ(c.arch, Arch::Qwen2);
  EXPECT_TRUE(c.has_qkv_bias);
  EXPECT_TRUE(c.tied_output);
  EXPECT_EQ(c.rope_style, RopeStyle::NeoxHalves);
  EXPECT_FLOAT_EQ(c.rope_freq_base, 1e6f);
  EXPECT_EQ(c.head_dim_k, 16);
}

TEST(ModelConfig, Qwen3HeadDimComesFromKeyLength) {
  const auto c = config_of("tiny-random-qwen3.gguf");
  EXPECT_EQ(c.arch, Arch::Qwen3);
  EXPECT_TRUE(c.has_qk_norm);
  EXPECT_EQ(c.n_embd, 64);
  EXPECT_EQ(c.head_dim_k, 32);  // not 64 / 4
  EXPECT_EQ(c.q_dim(), 128);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-6f);
}

TEST(ModelConfig, Llama31UsesRopeFrequencyFactors) {
  const auto c = config_of("tiny-random-llama31.gguf");
  EXPECT_TRUE(c.rope_has_freq_factors);
  EXPECT_FLOAT_EQ(c.rope_freq_base, 500000.0f);
  EXPECT_EQ(c.n_ctx_train, 131072);
  EXPECT_EQ(c.n_group(), 4);
}

TEST(ModelConfig, TiedEmbeddingsWithoutOutputWeight) {
  EXPECT_TRUE(config_of("tiny-random-llama-bpe.gguf").tied_output);
}

TEST(ModelConfig, RejectsUnsupportedArchitecturesNamingFileAndKey) {
  for (const char* f : {"tiny-random-deepseek2.gguf", "tiny-random-qwen3moe.gguf"}) {
    const std::string e = error_of(f);
    EXPECT_NE(e.find(f), std::string::npos) << e;
    EXPECT_NE(e.find("unsupported architecture"), std::string::npos) << e;
    EXPECT_NE(e.find("general.architecture"), std::string::npos) << e;
  }
}

TEST(ModelConfig, RejectsMixtureOfExpertsLlama) {
  const std::string e = error_of("tiny-random-mixtral.gguf");
  EXPECT_NE(e.find("tiny-random-mixtral.gguf"), std::string::npos) << e;
  EXPECT_NE(e.find("llama.expert_count"), std::string::npos) << e;
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
