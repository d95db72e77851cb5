// Mixture-of-experts and latent-attention variants the golden files do not
// cover (attn_kv_b, plain Q, softmax gating without groups, several shared
// experts, unnormalised weights, quantized experts), made with `shardlm synth`
// and compared with a scalar double-precision reference (reference_forward.h):
// a prompt as one batch, then decode steps, so both the batched expert path and
// the single-token one are checked.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <optional>

#include "core/cpu.h"
#include "model_test_util.h"
#include "reference_forward.h"
#include "test_paths.h"

namespace shardlm::test {
namespace {

const std::vector<TokenId> kTokens{1, 88, 312, 270, 433, 261, 290, 17, 400, 5};
constexpr size_t kPromptLen = 6;  // evaluated as one batch; the rest one token at a time

struct Variant {
  const char* preset;
  const char* type;
  double tol;  // max |ours − reference| relative to the largest reference logit
};
void PrintTo(const Variant& v, std::ostream* os) { *os << v.preset << "-" << v.type; }

std::string synthesize(const Variant& v) {
  const std::string path = ::testing::TempDir() + "shardlm_" + v.preset + "_" + v.type + ".gguf";
  const std::string cmd = std::string(shardlm::test_paths::shardlm_binary()) + " synth --preset " + v.preset + " --type " + v.type +
                          " --seed 7 -o " + path + " > /dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("failed: " + cmd);
  return path;
}

// Logits of every position: a batch for the prompt, then single-token steps.
std::vector<std::vector<float>> engine_logits(const std::string& path, int threads) {
  ModelOptions opt;
  opt.n_outputs = int64_t(kPromptLen);
  Loaded m(path, threads, opt);
  auto out = m.prompt({kTokens.begin(), kTokens.begin() + kPromptLen}, true);
  for (size_t i = kPromptLen; i < kTokens.size(); ++i) out.push_back(m.step(kTokens[i], int32_t(i)));
  return out;
}

class MoeMla : public ::testing::TestWithParam<Variant> {};

TEST_P(MoeMla, MatchesScalarReferenceInBatchAndDecode) {
  const std::string path = synthesize(GetParam());
  const auto ours = engine_logits(path, 1);
  auto file = gguf::File::open(path);
  const auto ref = ReferenceForward(*file).run(kTokens);
  ASSERT_EQ(ours.size(), ref.size());
  double max_diff = 0, max_ref = 0;
  for (size_t p = 0; p < ref.size(); ++p)
    for (size_t i = 0; i < ref[p].size(); ++i) {
      max_diff = std::max(max_diff, std::fabs(double(ours[p][i]) - ref[p][i]));
      max_ref = std::max(max_ref, std::fabs(ref[p][i]));
    }
  std::printf("%s %s: max |diff| %.3g of logits up to %.3g\n", GetParam().preset, GetParam().type, max_diff, max_ref);
  EXPECT_GT(max_ref, 0.1);
  EXPECT_LE(max_diff, GetParam().tol * max_ref);
  EXPECT_EQ(engine_logits(path, 2), ours) << "1 and 2 threads differ";
}

// F32: f32 rounding against double. Quantized: the effect of quantizing the
// activations to 8 bits, which the reference does not do.
const Variant kVariants[] = {
    {"tiny-mixtral", "f32", 1e-4},          {"tiny-qwen3moe", "f32", 1e-4},
    {"tiny-deepseek3", "f32", 1e-4},        {"tiny-deepseek2-lite", "f32", 1e-4},
    {"tiny-deepseek3", "q8_0", 0.03},       {"tiny-qwen3moe", "q4_0", 0.05},
    {"tiny-deepseek2-lite", "q8_0", 0.03},  {"small-qwen3moe", "f32", 1e-4},
    {"small-qwen3moe", "q4_0", 0.05},
};

INSTANTIATE_TEST_SUITE_P(Synth, MoeMla, ::testing::ValuesIn(kVariants), [](const auto& info) {
  std::string n = std::string(info.param.preset) + "_" + info.param.type;
  std::replace_if(n.begin(), n.end(), [](char ch) { return !std::isalnum(static_cast<unsigned char>(ch)); }, '_');
  return n;
});

// The reference itself agrees with llama.cpp's goldens through the engine:
// on the golden MoE files it matches the engine like on the variants.
TEST(MoeMla, ReferenceAgreesWithEngineOnGoldenModels) {
  for (const char* name : {"tiny-random-mixtral.gguf", "tiny-random-qwen3moe.gguf", "tiny-random-deepseek2.gguf"}) {
    const auto ours = engine_logits(model_path(name), 1);
    auto file = gguf::File::open(model_path(name));
    const auto ref = ReferenceForward(*file).run(kTokens);
    double max_diff = 0;
    for (size_t p = 0; p < ref.size(); ++p)
      for (size_t i = 0; i < ref[p].size(); ++i) max_diff = std::max(max_diff, std::fabs(double(ours[p][i]) - ref[p][i]));
    EXPECT_LE(max_diff, 1e-3) << name;
  }
}

// The latent cache in F16 (values read from the key rows) stays close to F32.
TEST(MoeMla, LatentCacheInF16StaysCloseToF32) {
  const auto f32 = engine_logits(model_path("tiny-random-deepseek2.gguf"), 1);
  ModelOptions opt;
  opt.kv_type = DType::F16;
  opt.n_outputs = int64_t(kTokens.size());
  Loaded m(model_path("tiny-random-deepseek2.gguf"), 1, opt);
  const auto f16 = m.prompt(kTokens, true);
  double max_diff = 0;
  for (size_t p = 0; p < f32.size(); ++p)
    for (size_t i = 0; i < f32[p].size(); ++i) max_diff = std::max(max_diff, std::fabs(double(f16[p][i]) - f32[p][i]));
  EXPECT_GT(max_diff, 0.0);  // the cache really is F16
  EXPECT_LT(max_diff, 0.05);
}

// expert_load() counts every (token, choice) pair of the last step, in MoE
// layers only (deepseek2's leading dense layer stays zero).
TEST(MoeMla, ExpertLoadCountsTheRoutedPairs) {
  auto file = gguf::File::open(model_path("tiny-random-deepseek2.gguf"));
  ModelOptions o;
  o.n_ctx = 8;
  Model m(*file, o);
  Batch b;
  for (int i = 0; i < 5; ++i) b.add(0, i, TokenId(11 * i + 2), i == 4);
  m.forward(b);
  const auto& c = m.config();
  const auto load = m.expert_load();
  ASSERT_EQ(load.size(), size_t(c.n_layer * c.moe.n_expert));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    int64_t pairs = 0;
    for (int64_t e = 0; e < c.moe.n_expert; ++e) pairs += load[size_t(l * c.moe.n_expert + e)];
    EXPECT_EQ(pairs, c.layer_has_experts(l) ? 5 * c.moe.n_expert_used : 0) << "layer " << l;
  }
}

// Read into memory, a rank's routed experts are repacked as 16-row panels
// (each expert whole groups, back to back, as the panel kernels read them)
// where this CPU has panel kernels, and so are the shared experts; --mmap
// leaves the routed experts as GGUF rows in the file. The logits agree
// within the kernels' summation order, for whole experts and a subset; with
// the kernel choices timed at load they are the same bits.
TEST(MoeMla, RoutedExpertsReadIntoMemoryRunOnPanels) {
  // A file of its own: the parameterised test writes and reads synthesize()'s.
  const std::string path = ::testing::TempDir() + "shardlm_experts_on_panels.gguf";
  ASSERT_EQ(std::system((std::string(shardlm::test_paths::shardlm_binary()) +
                         " synth --preset small-qwen3moe --type q4_0 --seed 7 -o " + path + " > /dev/null")
                            .c_str()),
            0);
  auto file = gguf::File::open(path);
  const auto cfg = ModelConfig::from_gguf(*file);
  const bool panels = active_isa() >= Isa::Avx2;
  RankPlan some = RankPlan::whole(cfg);
  some.experts = {2, 5};
  for (const std::optional<RankPlan>& plan : {std::optional<RankPlan>(), std::optional<RankPlan>(some)}) {
    std::vector<std::vector<float>> logits[2];
    for (const bool in_memory : {false, true}) {
      ModelOptions o;
      o.weights_in_memory = in_memory;
      o.plan = plan;
      o.n_outputs = int64_t(kPromptLen);
      Loaded m(path, 1, o);
      const ExpertWeights& E = m.model->weights().layers[0].experts;
      for (const ExpertStack* s : {&E.gate, &E.up, &E.down}) {
        EXPECT_EQ(s->all.layout, in_memory && panels ? WeightLayout::Panels16 : WeightLayout::Rows);
        if (in_memory) {
          EXPECT_EQ(s->all.rows, s->count * s->rows_per_expert);
          EXPECT_EQ(s->row_step, s->rows_per_expert);
        }
      }
      logits[in_memory] = m.prompt({kTokens.begin(), kTokens.begin() + kPromptLen}, true);
      logits[in_memory].push_back(m.step(kTokens[kPromptLen], int32_t(kPromptLen)));
    }
    for (size_t p = 0; p < logits[0].size(); ++p)
      for (size_t i = 0; i < logits[0][p].size(); ++i)
        ASSERT_NEAR(logits[1][p][i], logits[0][p][i], 1e-3 * (1 + std::fabs(logits[0][p][i]))) << "position " << p;
  }
  // Every kernel choice timed at load (as serve does) instead of on first
  // use: the choices may differ, the logits may not.
  ModelOptions o;
  o.n_outputs = int64_t(kPromptLen);
  o.time_kernels_at_load = true;
  Loaded timed(path, 1, o);
  const auto first = timed.prompt({kTokens.begin(), kTokens.begin() + kPromptLen}, true);
  o.time_kernels_at_load = false;
  Loaded lazy(path, 1, o);
  EXPECT_EQ(first, lazy.prompt({kTokens.begin(), kTokens.begin() + kPromptLen}, true));
  std::filesystem::remove(path);
}

// A rank's slice of every expert (tensor parallel inside experts) must cut
// ffn_down_exps on quant-block boundaries; elsewhere it is one clear line.
TEST(MoeMla, ExpertRowSlicesFollowQuantBlocks) {
  const std::string path = ::testing::TempDir() + "shardlm_tiny_qwen3moe_q4_0.gguf";
  ASSERT_EQ(std::system((std::string(shardlm::test_paths::shardlm_binary()) + " synth --preset tiny-qwen3moe --type q4_0 -o " + path +
                         " > /dev/null").c_str()),
            0);
  auto file = gguf::File::open(path);
  const auto cfg = ModelConfig::from_gguf(*file);
  RankPlan p = RankPlan::whole(cfg);
  p.expert_rows = {0, cfg.moe.n_ff_expert / 2};
  ModelOptions o;
  o.plan = p;
  try {
    Model m(*file, o);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'blk.0.ffn_down_exps.weight' (Q4_0) cannot be split at columns [0, 16)"),
              std::string::npos)
        << e.what();
  }
  p.expert_rows = {0, cfg.moe.n_ff_expert};
  p.experts = {2, 5};  // whole experts: any range
  o.plan = p;
  Model m(*file, o);
  EXPECT_EQ(m.weights().layers[0].experts.gate.first, 2);
  std::filesystem::remove(path);
}

// `synth --layers N` keeps the first N layers (and no more leading dense ones
// than that); `inspect` counts the experts and the parameters a token uses.
TEST(MoeMla, SynthLayersAndInspectActiveParameters) {
  const std::string path = ::testing::TempDir() + "shardlm_tiny_deepseek3_2layers.gguf";
  const std::string bin = shardlm::test_paths::shardlm_binary();
  ASSERT_EQ(std::system((bin + " synth --preset tiny-deepseek3 --type q8_0 --layers 2 -o " + path + " > /dev/null").c_str()), 0);
  const std::string json_path = path + ".json";
  ASSERT_EQ(std::system((bin + " inspect --json --no-tensors " + path + " > " + json_path).c_str()), 0);
  const auto j = read_json(json_path);
  EXPECT_EQ(j["hyperparameters"]["block_count"].get<int>(), 2);
  EXPECT_EQ(j["experts"]["count"].get<int>(), 8);
  EXPECT_EQ(j["experts"]["used_per_token"].get<int>(), 2);
  EXPECT_EQ(j["experts"]["shared"].get<int>(), 1);
  // One MoE layer of 8 experts of 3 · 64 · 32 values; a token runs 2 of them.
  EXPECT_EQ(j["experts"]["parameters"].get<int64_t>(), 8 * 3 * 64 * 32);
  EXPECT_EQ(j["n_params"].get<int64_t>() - j["active_params"].get<int64_t>(), 6 * 3 * 64 * 32);
  auto file = gguf::File::open(path);
  EXPECT_EQ(ModelConfig::from_gguf(*file).n_layer, 2);
  EXPECT_NE(std::system((bin + " synth --preset tiny-deepseek3 --layers 4 -o " + path + " 2> /dev/null").c_str()), 0);
}

}  // namespace
}  // namespace shardlm::test
