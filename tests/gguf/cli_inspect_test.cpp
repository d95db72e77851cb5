// Runs the built `shardlm` binary: inspect on real models (key lines checked
// against models/CATALOG.md) and on a corrupted file.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include "gguf_test_util.h"
#include "test_paths.h"

namespace shardlm::gguf {
namespace {
using namespace testing;

struct CliRun {
  int status = -1;
  std::string out;  // stdout + stderr
};

CliRun run_shardlm(const std::string& args) {
  CliRun r;
  const std::string cmd = std::string(shardlm::test_paths::shardlm_binary()) + " " + args + " 2>&1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::filesystem::path find_model(const std::string& name) {
  const std::filesystem::path p = models_dir() / name;
  return std::filesystem::exists(p) ? p : std::filesystem::path{};
}

bool has_line(const std::string& out, const std::string& key, const std::string& value) {
  size_t pos = 0;
  while ((pos = out.find(key, pos)) != std::string::npos) {
    if (pos == 0 || out[pos - 1] == '\n') {
      const size_t end = out.find('\n', pos);
      const std::string line = out.substr(pos, end - pos);
      if (line.size() >= value.size() && line.compare(line.size() - value.size(), value.size(), value) == 0)
        return true;
    }
    ++pos;
  }
  return false;
}

TEST(CliInspect, Stories260K) {
  const auto model = find_model("stories260K.gguf");
  if (model.empty()) GTEST_SKIP() << "stories260K.gguf not found";
  const CliRun r = run_shardlm("inspect " + model.string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has_line(r.out, "file size:", "1,185,376 bytes")) << r.out;
  EXPECT_TRUE(has_line(r.out, "GGUF version:", "3")) << r.out;
  EXPECT_TRUE(has_line(r.out, "architecture:", "llama")) << r.out;
  EXPECT_TRUE(has_line(r.out, "block_count:", " 5")) << r.out;
  EXPECT_TRUE(has_line(r.out, "embedding_length:", " 64")) << r.out;
  EXPECT_TRUE(has_line(r.out, "feed_forward_length:", " 172")) << r.out;
  EXPECT_TRUE(has_line(r.out, "attention.head_count_kv:", " 4")) << r.out;
  EXPECT_TRUE(has_line(r.out, "head_dim:", " 8 (embedding_length / attention.head_count)")) << r.out;
  EXPECT_TRUE(has_line(r.out, "rope.freq_base:", " 10000 (default)")) << r.out;
  EXPECT_TRUE(has_line(r.out, "tokenizer:", " llama")) << r.out;
  EXPECT_TRUE(has_line(r.out, "vocab_size:", " 512")) << r.out;
  EXPECT_TRUE(has_line(r.out, "bos_id:", " 1")) << r.out;
  EXPECT_TRUE(has_line(r.out, "eos_id:", " 2")) << r.out;
  EXPECT_TRUE(has_line(r.out, "parameters:", " 292,800")) << r.out;
  EXPECT_NE(r.out.find("blk.4.ffn_down.weight"), std::string::npos);
}

TEST(CliInspect, BpeModelJson) {
  const auto model = find_model("tiny-random-llama-bpe.gguf");
  if (model.empty()) GTEST_SKIP() << "tiny-random-llama-bpe.gguf not found";
  const CliRun r = run_shardlm("inspect --json " + model.string());
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["file_size"], 3683552);
  EXPECT_EQ(j["architecture"], "llama");
  EXPECT_EQ(j["hyperparameters"]["block_count"], 2);
  EXPECT_EQ(j["hyperparameters"]["rope.freq_base"], 500000.0);
  EXPECT_EQ(j["tokenizer"]["model"], "gpt2");
  EXPECT_EQ(j["tokenizer"]["pre"], "llama-bpe");
  EXPECT_EQ(j["tokenizer"]["vocab_size"], 50257);
  EXPECT_EQ(j["tokenizer"]["bos_id"], 50256);
  EXPECT_EQ(j["tokenizer"]["add_bos"], true);
  EXPECT_EQ(j["tensors"].size(), 20u);
  EXPECT_EQ(j["tensor_types"]["Q4_0"], 1);
  EXPECT_FALSE(r.out.find("\"output.weight\"") != std::string::npos);  // tied embeddings
}

TEST(CliInspect, Qwen3KeyLength) {
  const auto model = find_model("synthetic/tiny-random-qwen3.gguf");
  if (model.empty()) GTEST_SKIP() << "tiny-random-qwen3.gguf not found";
  const CliRun r = run_shardlm("inspect --no-tensors " + model.string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has_line(r.out, "architecture:", "qwen3")) << r.out;
  EXPECT_TRUE(has_line(r.out, "attention.key_length:", " 32")) << r.out;
  EXPECT_TRUE(has_line(r.out, "rope.freq_base:", " 1000000")) << r.out;
  EXPECT_TRUE(has_line(r.out, "attention.layer_norm_rms_epsilon:", " 1e-06")) << r.out;
  EXPECT_EQ(r.out.find("head_dim:"), std::string::npos) << "key_length is given, nothing to derive";
}

TEST(CliInspect, CorruptedAndLegacyFilesGiveOneLineErrors) {
  const auto model = find_model("stories260K-Q8_0.gguf");
  if (model.empty()) GTEST_SKIP() << "stories260K-Q8_0.gguf not found";
  TempDir dir;
  auto bytes = read_all(model);
  bytes.resize(20000);  // cuts the tensor data
  const std::string bad = dir.file("cut.gguf");
  std::FILE* f = std::fopen(bad.c_str(), "wb");
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  CliRun r = run_shardlm("inspect " + bad);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out.rfind("shardlm: error: " + bad + ": tensor ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("extends past the end"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << "one line: " << r.out;

  r = run_shardlm("inspect " + dir.file("missing.gguf"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("missing.gguf"), std::string::npos) << r.out;

  const auto legacy = find_model("legacy/tinyllamas-stories-260k-f32.gguf");
  if (!legacy.empty()) {
    r = run_shardlm("inspect " + legacy.string());
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.out.find("unsupported version 1"), std::string::npos) << r.out;
  }
}

}  // namespace
}  // namespace shardlm::gguf
