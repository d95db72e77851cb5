// shardlm synth → inspect → gguf::File: shapes, types, metadata and vocabulary
// of generated tiny models.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <sys/wait.h>
#include <unordered_set>

#include "core/quant.h"
#include "gguf_test_util.h"
#include "test_paths.h"

namespace shardlm::gguf {
namespace {
using namespace testing;

std::string fmt_args(const std::string& path, const std::string& type) {
  return "synth --preset tiny --type " + type + " -o " + path;
}

int run_quiet(const std::string& args, std::string* out = nullptr) {
  const std::string cmd = std::string(shardlm::test_paths::shardlm_binary()) + " " + args + " 2>&1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return -1;
  std::array<char, 4096> buf;
  size_t n;
  std::string text;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) text.append(buf.data(), n);
  const int st = ::pclose(p);
  if (out) *out = text;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(CliSynth, TinyOfSeveralTypesOpensWithTheRightShapes) {
  TempDir dir;
  for (const auto& [type_name, type] : {std::pair{"q8_0", DType::Q8_0}, std::pair{"q4_k", DType::Q4_K},
                                        std::pair{"f16", DType::F16}}) {
    SCOPED_TRACE(type_name);
    const std::string path = dir.file(std::string("tiny-") + type_name + ".gguf");
    std::string out;
    ASSERT_EQ(run_quiet(fmt_args(path, type_name), &out), 0) << out;
    auto f = File::open(path);
    EXPECT_EQ(f->require_string("general.architecture"), "llama");
    EXPECT_EQ(f->require_u64("llama.block_count"), 2u);
    EXPECT_EQ(f->require_u64("llama.embedding_length"), 256u);
    EXPECT_EQ(f->require_u64("llama.attention.head_count_kv"), 2u);
    EXPECT_EQ(f->require_tensor("token_embd.weight").shape_string(), "[256, 512]");
    EXPECT_EQ(f->require_tensor("token_embd.weight").type, type);
    EXPECT_EQ(f->require_tensor("blk.1.attn_k.weight").shape_string(), "[256, 64]");
    EXPECT_EQ(f->require_tensor("blk.1.ffn_down.weight").shape_string(), "[768, 256]");
    EXPECT_EQ(f->require_tensor("blk.1.ffn_down.weight").type, type);
    EXPECT_EQ(f->require_tensor("blk.0.attn_norm.weight").type, DType::F32);
    EXPECT_EQ(f->require_tensor("output.weight").shape_string(), "[256, 512]");
    EXPECT_EQ(f->tensors().size(), 2u * 9 + 3);
    // Weights look like an initialised model: N(0, 0.02) matrices, the output
    // projections scaled by 1/sqrt(2·n_layer), norms around 1.
    auto moments = [](const TensorInfo& t) {
      std::vector<float> v(size_t(t.n_elements()));
      for (int64_t r = 0; r < t.n_rows(); ++r)
        dequantize_row(t.type, t.data + r * t.row_size(), v.data() + r * t.ne[0], t.ne[0]);
      double sum = 0, sq = 0;
      for (float x : v) sum += x, sq += double(x) * x;
      const double mean = sum / double(v.size());
      return std::pair{mean, std::sqrt(sq / double(v.size()) - mean * mean)};
    };
    const auto [embd_mean, embd_std] = moments(f->require_tensor("token_embd.weight"));
    EXPECT_NEAR(embd_mean, 0.0, 0.002);
    EXPECT_NEAR(embd_std, 0.02, 0.003);
    EXPECT_NEAR(moments(f->require_tensor("blk.0.ffn_down.weight")).second, 0.01, 0.002);
    EXPECT_NEAR(moments(f->require_tensor("output_norm.weight")).first, 1.0, 0.01);

    std::string inspect;
    ASSERT_EQ(run_quiet("inspect " + path, &inspect), 0) << inspect;
    EXPECT_NE(inspect.find("block_count:"), std::string::npos);
    EXPECT_NE(inspect.find("tokenizer:                         gpt2"), std::string::npos) << inspect;
  }
}

TEST(CliSynth, Q4KMixUsesQ6KWhereLlamaQuantizeDoes) {
  TempDir dir;
  const std::string path = dir.file("tiny-q4_k_m.gguf");
  std::string out;
  ASSERT_EQ(run_quiet(fmt_args(path, "q4_k_m"), &out), 0) << out;
  auto f = File::open(path);
  // Two layers: layer 1 is in the last eighth and gets more bits, layer 0
  // (2/8 rounds to 0 layers in the first eighth) does not.
  EXPECT_EQ(f->require_tensor("output.weight").type, DType::Q6_K);
  EXPECT_EQ(f->require_tensor("token_embd.weight").type, DType::Q4_K);
  EXPECT_EQ(f->require_tensor("blk.1.attn_v.weight").type, DType::Q6_K);
  EXPECT_EQ(f->require_tensor("blk.0.attn_v.weight").type, DType::Q4_K);
  EXPECT_EQ(f->require_tensor("blk.0.attn_q.weight").type, DType::Q4_K);
  // ffn_down rows are 768 long: a multiple of 256, so the mix applies too.
  EXPECT_EQ(f->require_tensor("blk.1.ffn_down.weight").type, DType::Q6_K);
  EXPECT_EQ(f->require_tensor("blk.1.ffn_up.weight").type, DType::Q4_K);
}

// A mixture of experts' router stays F32 whatever the type, as the
// converters write it and llama-quantize leaves it; the experts take the type.
TEST(CliSynth, RoutersStayF32) {
  TempDir dir;
  for (const char* type : {"q4_0", "q4_k_m", "bf16"}) {
    SCOPED_TRACE(type);
    const std::string path = dir.file(std::string("moe-") + type + ".gguf");
    std::string out;
    ASSERT_EQ(run_quiet("synth --preset tiny-qwen3moe --type " + std::string(type) + " -o " + path, &out), 0) << out;
    auto f = File::open(path);
    EXPECT_EQ(f->require_tensor("blk.0.ffn_gate_inp.weight").type, DType::F32);
    EXPECT_NE(f->require_tensor("blk.0.ffn_up_exps.weight").type, DType::F32);
  }
}

TEST(CliSynth, GeneratedVocabularyIsConsistentAndSeedDeterministic) {
  TempDir dir;
  const std::string a = dir.file("a.gguf"), b = dir.file("b.gguf"), c = dir.file("c.gguf");
  ASSERT_EQ(run_quiet(fmt_args(a, "q4_0") + " --seed 7"), 0);
  ASSERT_EQ(run_quiet(fmt_args(b, "q4_0") + " --seed 7 --threads 1"), 0);
  ASSERT_EQ(run_quiet(fmt_args(c, "q4_0") + " --seed 8"), 0);
  EXPECT_EQ(read_all(a), read_all(b)) << "same seed, different thread count";
  EXPECT_NE(read_all(a), read_all(c));

  auto f = File::open(a);
  const auto tokens = *f->get_string_array("tokenizer.ggml.tokens");
  const auto merges = *f->get_string_array("tokenizer.ggml.merges");
  ASSERT_EQ(tokens.size(), 512u);
  EXPECT_EQ(f->get_int_array("tokenizer.ggml.token_type")->size(), 512u);
  EXPECT_EQ(tokens[0], "\xC4\x80");  // byte 0 → U+0100
  EXPECT_EQ(tokens['a'], "a");
  EXPECT_EQ(tokens[' '], "\xC4\xA0");  // Ġ
  std::unordered_set<std::string> known(tokens.begin(), tokens.end());
  EXPECT_EQ(known.size(), tokens.size());
  EXPECT_EQ(merges.size(), 512u - 256 - 2);
  for (const auto& m : merges) {
    const size_t sp = m.find(' ');
    ASSERT_NE(sp, std::string::npos) << m;
    EXPECT_TRUE(known.count(m.substr(0, sp)) && known.count(m.substr(sp + 1))) << m;
    EXPECT_TRUE(known.count(m.substr(0, sp) + m.substr(sp + 1))) << m;
  }
  EXPECT_EQ(f->require_u64("tokenizer.ggml.bos_token_id"), 510u);
  EXPECT_EQ(f->require_u64("tokenizer.ggml.eos_token_id"), 511u);
  EXPECT_EQ(f->require_string("tokenizer.ggml.model"), "gpt2");
}

TEST(CliSynth, VocabFromAndErrors) {
  const std::filesystem::path vocab = models_dir() / "stories260K.gguf";
  TempDir dir;
  if (std::filesystem::exists(vocab)) {
    const std::string path = dir.file("v.gguf");
    ASSERT_EQ(run_quiet(fmt_args(path, "q8_0") + " --vocab-from " + vocab.string()), 0);
    auto f = File::open(path);
    auto src = File::open(vocab.string());
    EXPECT_EQ(*f->get_string_array("tokenizer.ggml.tokens"), *src->get_string_array("tokenizer.ggml.tokens"));
    EXPECT_EQ(f->require_string("tokenizer.ggml.model"), "llama");
  }
  std::string out;
  EXPECT_EQ(run_quiet("synth --preset nope --type q8_0 -o " + dir.file("x.gguf"), &out), 2);
  EXPECT_NE(out.find("--preset: 'nope' is unknown"), std::string::npos) << out;
  EXPECT_EQ(run_quiet(fmt_args(dir.file("x.gguf"), "iq2_xxs"), &out), 2);
  EXPECT_NE(out.find("--type"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.gguf")));
}


// --no-weights writes the real header over a hole; `plan --preset` plans from
// such a file: memory holds every expert, a token reads the chosen ones.
TEST(CliSynth, NoWeightsHeaderAndPlanFromPreset) {
  TempDir dir;
  const std::string path = dir.file("hdr.gguf");
  ASSERT_EQ(run_quiet("synth --preset tiny-qwen3moe --type q8_0 --no-weights -o " + path), 0);
  auto f = File::open(path);
  EXPECT_EQ(f->require_u64("qwen3moe.expert_count"), 8u);
  EXPECT_EQ(f->require_tensor("blk.1.ffn_down_exps.weight").data[0], 0);
  const std::string nodes = dir.file("nodes.json");
  std::FILE* j = std::fopen(nodes.c_str(), "w");
  ASSERT_NE(j, nullptr);
  std::fputs(R"({"nodes": [{"name": "n", "memory_gb": 1, "bandwidth_gbs": 10, "cores": 2, "count": 2}]})", j);
  std::fclose(j);
  std::string out;
  ASSERT_EQ(run_quiet("plan --preset tiny-qwen3moe --type q8_0 --describe " + nodes, &out), 0) << out;
  EXPECT_NE(out.find("experts: 3 of 8 per token; weights in memory"), std::string::npos) << out;
  ASSERT_EQ(run_quiet("plan --preset tiny-deepseek3 --describe " + nodes, &out), 0) << out;
  EXPECT_NE(out.find("latent attention keeps 48 values per token per layer"), std::string::npos) << out;
  EXPECT_EQ(run_quiet("plan --preset tiny-qwen3moe -m " + path + " --describe " + nodes, &out), 2);
  EXPECT_NE(out.find("exactly one of -m/--model and --preset"), std::string::npos) << out;
}
}  // namespace
}  // namespace shardlm::gguf
