// Every bundled and shared model must open; a few values are checked against
// models/CATALOG.md.
#include <gtest/gtest.h>

#include <set>

#include "gguf_test_util.h"

namespace shardlm::gguf {
namespace {
using namespace testing;

std::filesystem::path model_path(const std::string& name) {
  const std::filesystem::path p = models_dir() / name;
  return std::filesystem::exists(p) ? p : std::filesystem::path{};
}

TEST(GgufModels, EveryModelFileOpensAndHasConsistentTensors) {
  const auto files = gguf_files_under(models_dir());
  if (files.empty()) GTEST_SKIP() << "no .gguf under " << models_dir();
  int opened = 0;
  for (const auto& path : files) {
    SCOPED_TRACE(path.string());
    if (path.parent_path().filename() == "legacy") {
      try {
        File::open(path.string());
        ADD_FAILURE() << "GGUF v1 file opened";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("unsupported version 1"), std::string::npos) << e.what();
      }
      continue;
    }
    auto f = File::open(path.string());
    ++opened;
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->file_size(), std::filesystem::file_size(path));
    EXPECT_TRUE(f->get_string("general.architecture").has_value());
    EXPECT_EQ(f->data_offset() % f->alignment(), 0u);
    for (const auto& t : f->tensors()) {
      EXPECT_EQ(t.n_bytes, uint64_t(t.n_rows()) * t.row_size()) << t.name;
      ASSERT_NE(t.data, nullptr) << t.name;
      EXPECT_LE(f->data_offset() + t.offset + t.n_bytes, f->file_size()) << t.name;
      EXPECT_EQ(f->find_tensor(t.name), &t);
    }
  }
  EXPECT_GT(opened, 0);
}

TEST(GgufModels, Stories260KMatchesReadme) {
  const auto path = model_path("stories260K.gguf");
  if (path.empty()) GTEST_SKIP() << "stories260K.gguf not found";
  auto f = File::open(path.string());
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->file_size(), 1185376u);
  EXPECT_EQ(f->require_string("general.architecture"), "llama");
  EXPECT_EQ(f->require_u64("llama.block_count"), 5u);
  EXPECT_EQ(f->require_u64("llama.embedding_length"), 64u);
  EXPECT_EQ(f->require_u64("llama.feed_forward_length"), 172u);
  EXPECT_EQ(f->require_u64("llama.attention.head_count"), 8u);
  EXPECT_EQ(f->require_u64("llama.attention.head_count_kv"), 4u);
  EXPECT_EQ(f->require_u64("llama.context_length"), 2048u);
  EXPECT_FLOAT_EQ(float(f->require_f64("llama.attention.layer_norm_rms_epsilon")), 9.99999975e-06f);
  EXPECT_FALSE(f->has("llama.rope.freq_base"));
  EXPECT_EQ(f->require_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens")->size(), 512u);
  EXPECT_EQ(f->get_f32_array("tokenizer.ggml.scores")->size(), 512u);
  EXPECT_EQ(f->get_int_array("tokenizer.ggml.token_type")->size(), 512u);
  EXPECT_EQ(f->require_u64("tokenizer.ggml.bos_token_id"), 1u);
  EXPECT_EQ(f->require_u64("tokenizer.ggml.eos_token_id"), 2u);
  EXPECT_EQ(f->tensors().size(), 48u);
  int64_t params = 0;
  for (const auto& t : f->tensors()) {
    EXPECT_EQ(t.type, DType::F32) << t.name;
    params += t.n_elements();
  }
  EXPECT_EQ(params, 292800);
  const auto& embd = f->require_tensor("token_embd.weight");
  EXPECT_EQ(embd.shape_string(), "[64, 512]");
  EXPECT_EQ(embd.n_bytes, 64u * 512 * 4);
  EXPECT_EQ(f->require_tensor("blk.0.ffn_down.weight").shape_string(), "[172, 64]");
}

TEST(GgufModels, QuantizedStoriesHaveTheDocumentedTypes) {
  const auto path = model_path("stories260K-Q4_0.gguf");
  if (path.empty()) GTEST_SKIP() << "stories260K-Q4_0.gguf not found";
  auto f = File::open(path.string());
  EXPECT_EQ(f->file_size(), 277024u);
  EXPECT_EQ(f->require_u64("general.file_type"), 2u);
  EXPECT_EQ(f->require_tensor("token_embd.weight").type, DType::Q4_0);
  EXPECT_EQ(f->require_tensor("output.weight").type, DType::Q8_0);
  EXPECT_EQ(f->require_tensor("blk.0.ffn_down.weight").type, DType::F16);
  EXPECT_EQ(f->require_tensor("blk.0.attn_norm.weight").type, DType::F32);
  EXPECT_EQ(f->require_tensor("token_embd.weight").n_bytes, 512u * (64 / 32) * 18);
}

TEST(GgufModels, MixedKQuantFileCoversManyTypes) {
  const auto path = model_path("tiny-random-llama-kq-mixed.gguf");
  if (path.empty()) GTEST_SKIP() << "tiny-random-llama-kq-mixed.gguf not found";
  auto f = File::open(path.string());
  EXPECT_EQ(f->require_tensor("token_embd.weight").type, DType::Q6_K);
  EXPECT_EQ(f->require_tensor("blk.0.attn_q.weight").type, DType::Q2_K);
  EXPECT_EQ(f->require_tensor("blk.1.attn_output.weight").type, DType::BF16);
  EXPECT_EQ(f->require_u64("llama.embedding_length"), 256u);
  std::set<DType> types;
  for (const auto& t : f->tensors()) types.insert(t.type);
  EXPECT_EQ(types.size(), 13u);  // README: one file covers 13 ggml types
}

TEST(GgufModels, Qwen3HeadDimAndVocabOnlyFiles) {
  const auto qwen = model_path("synthetic/tiny-random-qwen3.gguf");
  if (qwen.empty()) GTEST_SKIP() << "synthetic models not found";
  auto f = File::open(qwen.string());
  EXPECT_EQ(f->require_string("general.architecture"), "qwen3");
  EXPECT_EQ(f->require_u64("qwen3.attention.key_length"), 32u);
  EXPECT_DOUBLE_EQ(f->require_f64("qwen3.rope.freq_base"), 1e6);
  EXPECT_EQ(f->require_tensor("blk.0.attn_q_norm.weight").shape_string(), "[32]");

  auto v = File::open(model_path("vocab/ggml-vocab-gpt-2.gguf").string());
  EXPECT_TRUE(v->tensors().empty());
  EXPECT_EQ(v->get_string_array("tokenizer.ggml.tokens")->size(), 50257u);
  EXPECT_EQ(v->get_string_array("tokenizer.ggml.merges")->size(), 50000u);
}

TEST(GgufModels, TypedAccessorsRejectWrongTypesNamingTheKey) {
  const auto path = model_path("stories260K.gguf");
  if (path.empty()) GTEST_SKIP() << "stories260K.gguf not found";
  auto f = File::open(path.string());
  EXPECT_THROW(f->get_string("llama.block_count"), Error);
  try {
    f->get_u64("general.architecture");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'general.architecture'"), std::string::npos) << e.what();
  }
  try {
    f->require_u64("llama.nope");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing metadata key 'llama.nope'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(f->get_string_array("tokenizer.ggml.scores"), Error);
  EXPECT_THROW(f->get_int_array("tokenizer.ggml.scores"), Error);
  EXPECT_THROW(f->require_tensor("no.such.tensor"), Error);
  EXPECT_FALSE(f->get_u64("missing").has_value());
}

TEST(GgufModels, OpenReportsMissingAndEmptyFiles) {
  TempDir dir;
  EXPECT_THROW(File::open(dir.file("absent.gguf")), Error);
  std::FILE* fp = std::fopen(dir.file("empty.gguf").c_str(), "wb");
  std::fclose(fp);
  try {
    File::open(dir.file("empty.gguf"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("empty.gguf"), std::string::npos);
  }
}

}  // namespace
}  // namespace shardlm::gguf
