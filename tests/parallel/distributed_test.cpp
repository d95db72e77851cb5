// Distributed runs against the single-node engine: every rank is a forked
// process on loopback TCP (tests/comm/rank_harness.h); rank 0 drives, runs
// the single-node reference itself and reports the comparison as JSON.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "../comm/rank_harness.h"
#include "gguf/gguf.h"
#include "model/sampler.h"
#include "parallel/distributed_session.h"
#include "step_driver.h"
#include "test_paths.h"

namespace shardlm::parallel {
namespace {

using comm::testing::describe;
using comm::testing::run_ranks;

// "synth:<preset>:<type>" is a file `shardlm synth` writes for this test process.
std::string model_path(const std::string& name) {
  if (name.rfind("synth:", 0) == 0) {
    const auto colon = name.find(':', 6);
    const std::string preset = name.substr(6, colon - 6), type = name.substr(colon + 1);
    const std::string path = ::testing::TempDir() + "shardlm_dist_" + preset + "_" + type + "_" +
                             std::to_string(getpid()) + ".gguf";
    if (!std::filesystem::exists(path)) {
      const std::string cmd =
          std::string(shardlm::test_paths::shardlm_binary()) + " synth --preset " + preset + " --type " + type + " -o " + path + " > /dev/null";
      EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    }
    return path;
  }
  const std::string top = std::string(shardlm::test_paths::models_dir()) + "/" + name;
  return std::filesystem::exists(top) ? top : std::string(shardlm::test_paths::models_dir()) + "/synthetic/" + name;
}

struct Case {
  const char* model;
  int tp, pp;
  double logit_tol;  // |distributed − single node|: only the summation order differs (f32 wire)
  DType wire = DType::F32;
  bool whole_experts = false;  // MoE layers split by whole experts (--ep) instead of expert rows
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.model << (c.whole_experts ? " ep" : " tp") << c.tp << " pp" << c.pp << " wire " << dtype_name(c.wire);
}

struct Reference {
  std::vector<float> logits;         // after the prompt
  std::vector<TokenId> tokens;       // greedy continuation
  std::vector<float> margins;        // top-1 − top-2 at each generated step
};

float margin(std::span<const float> l) {
  float a = -INFINITY, b = -INFINITY;
  for (float x : l) {
    if (x > a) {
      b = a;
      a = x;
    } else if (x > b) {
      b = x;
    }
  }
  return a - b;
}

// The single-node engine on one thread, greedy.
Reference single_node(const gguf::File& file, const std::vector<TokenId>& prompt, int n, int64_t n_batch) {
  ModelOptions o;
  o.n_ctx = int64_t(prompt.size()) + n + 1;
  o.n_batch = n_batch;
  Model m(file, o);
  Reference r;
  Batch b;
  for (size_t at = 0; at < prompt.size(); at += size_t(n_batch)) {
    b.clear();
    for (size_t i = at; i < std::min(prompt.size(), at + size_t(n_batch)); ++i)
      b.add(0, int32_t(i), prompt[i], i + 1 == prompt.size());
    m.forward(b);
  }
  r.logits.assign(m.logits(0).begin(), m.logits(0).end());
  for (int i = 0; i < n; ++i) {
    const auto l = m.logits(0);
    r.tokens.push_back(argmax(l));
    r.margins.push_back(margin(l));
    b.clear();
    b.add(0, int32_t(prompt.size()) + i, r.tokens.back(), true);
    m.forward(b);
  }
  return r;
}

std::vector<TokenId> test_prompt(const gguf::File& file, size_t length) {
  const int64_t vocab = ModelConfig::from_gguf(file).n_vocab;
  std::vector<TokenId> p;
  for (size_t i = 0; i < length; ++i) p.push_back(TokenId((i * 7919 + 13) % size_t(std::min<int64_t>(vocab, 500))));
  return p;
}

// Runs `c` on tp × pp ranks; rank 0 returns {"max_diff", "agree", "first_mismatch_margin", "tokens"}.
nlohmann::json run_case(const Case& c, size_t prompt_len, int n_predict, int64_t n_batch) {
  const std::string path = model_path(c.model);  // before the ranks fork: one synthesized file for all
  auto outcomes = run_ranks(c.tp * c.pp, [&](comm::Communicator& comm) -> std::string {
    auto file = gguf::File::open(path);
    const Plan plan = uniform_plan(*file, c.tp, c.pp, {}, default_node("127.0.0.1"), 1, c.wire, c.whole_experts);
    DistributedSessionOptions o;
    o.n_ctx = int64_t(prompt_len) + n_predict + 1;
    o.n_batch = n_batch;
    DistributedSession s(comm.shared_from_this(), plan, *file, o);
    if (comm.rank() != 0) {
      while (s.serve()) {
      }
      return "served";
    }
    const auto prompt = test_prompt(*file, prompt_len);
    const auto logits = s.prompt_logits(prompt);
    SamplerParams greedy;
    greedy.temperature = 0;
    const std::vector<TokenId> got = testing::generate_steps(s, {prompt}, greedy, n_predict)[0];
    s.shutdown();
    const RankStats stats = s.stats();
    int64_t by_length = 0;
    for (int64_t n : stats.all_reduce_waits) by_length += n;
    const Reference ref = single_node(*file, prompt, n_predict, n_batch);
    nlohmann::json j;
    double diff = 0;
    for (size_t i = 0; i < ref.logits.size(); ++i) diff = std::max(diff, double(std::fabs(ref.logits[i] - logits.at(i))));
    j["max_diff"] = diff;
    j["n_tokens"] = got.size();
    size_t agree = 0;
    while (agree < got.size() && got[agree] == ref.tokens[agree]) ++agree;
    j["agree"] = agree;
    j["first_mismatch_margin"] = agree < ref.tokens.size() ? ref.margins[agree] : 1e9;
    j["tokens"] = got;
    j["all_reduces"] = stats.all_reduces;
    j["all_reduces_by_length"] = by_length;
    return j.dump();
  });
  if (std::string(c.model).rfind("synth:", 0) == 0) std::filesystem::remove(path);
  for (const auto& o : outcomes)
    if (!o.ok()) ADD_FAILURE() << describe(outcomes);
  if (!outcomes[0].ok()) return {};
  return nlohmann::json::parse(outcomes[0].output);
}

class Distributed : public ::testing::TestWithParam<Case> {};

// Greedy tokens equal the single node's until a step whose margin is within
// the numerical error (the near-tie rule of models/golden/README.md).
TEST_P(Distributed, MatchesSingleNode) {
  const Case c = GetParam();
  const int n_predict = 24;
  const auto j = run_case(c, 9, n_predict, 64);
  ASSERT_FALSE(j.is_null());
  std::printf("  %d/%d greedy tokens as on one node, max |logit diff| %.3g\n", j["agree"].get<int>(), n_predict,
              j["max_diff"].get<double>());
  EXPECT_LE(j["max_diff"].get<double>(), c.logit_tol);
  EXPECT_EQ(j["n_tokens"].get<int>(), n_predict);
  // Every all-reduce lands in one bucket of the wait histogram.
  EXPECT_EQ(j["all_reduces"].get<int64_t>() > 0, c.tp > 1);
  EXPECT_EQ(j["all_reduces_by_length"], j["all_reduces"]);
  if (c.wire == DType::F16 || c.wire == DType::BF16) {
    EXPECT_EQ(j["agree"].get<int>(), n_predict) << j.dump();
  }
  if (j["agree"].get<int>() < n_predict) {
    EXPECT_LT(j["first_mismatch_margin"].get<double>(), 10 * c.logit_tol) << j.dump();
  }
}

// Every model the engine supports, and each layout its shapes allow. Not run:
// tp 3/4 of the Q8_0/Q4_0 stories (attn_output blocks of 32 columns = 4 heads)
// and any tp of the K-quant model (256-column blocks = all 8 heads): the
// planner refuses those (planner_test).
INSTANTIATE_TEST_SUITE_P(
    Layouts, Distributed,
    ::testing::Values(Case{"stories260K.gguf", 2, 1, 1e-4}, Case{"stories260K.gguf", 3, 1, 1e-4},
                      Case{"stories260K.gguf", 4, 1, 1e-4}, Case{"stories260K.gguf", 1, 2, 1e-4},
                      Case{"stories260K.gguf", 1, 3, 1e-4}, Case{"stories260K.gguf", 2, 2, 1e-4},
                      Case{"stories260K-Q8_0.gguf", 2, 1, 1e-3}, Case{"stories260K-Q8_0.gguf", 1, 3, 1e-4},
                      Case{"stories260K-Q4_0.gguf", 2, 1, 1e-3}, Case{"stories260K-Q4_0.gguf", 2, 2, 1e-3},
                      Case{"tiny-random-llama-kq-Q4_K_M.gguf", 1, 2, 1e-4},
                      Case{"tiny-random-llama-kq-mixed.gguf", 1, 2, 1e-4},
                      Case{"tiny-random-qwen2.gguf", 2, 1, 1e-4}, Case{"tiny-random-qwen2.gguf", 1, 2, 1e-4},
                      Case{"tiny-random-qwen3.gguf", 2, 1, 1e-4}, Case{"tiny-random-qwen3.gguf", 4, 1, 1e-3},
                      Case{"tiny-random-qwen3.gguf", 2, 2, 1e-4}, Case{"tiny-random-llama31.gguf", 2, 1, 1e-4},
                      Case{"tiny-random-llama31.gguf", 4, 1, 1e-3}, Case{"tiny-random-llama31.gguf", 1, 2, 1e-4},
                      Case{"llama-2-tiny-random.gguf", 2, 1, 1e-5}));

// Mixture-of-experts and latent attention (the synthetic models of
// models/README.md): tp = every expert's rows split, ep = whole experts, pp,
// and both with pp. The router sees the same hidden state on every rank up to
// the all-reduce's summation order, so it chooses the same experts, and the
// logits differ from one node's only by that order.
INSTANTIATE_TEST_SUITE_P(
    Experts, Distributed,
    ::testing::Values(Case{"tiny-random-mixtral.gguf", 2, 1, 1e-4}, Case{"tiny-random-mixtral.gguf", 2, 1, 1e-4, DType::F32, true},
                      Case{"tiny-random-mixtral.gguf", 1, 2, 1e-4}, Case{"tiny-random-mixtral.gguf", 2, 2, 1e-4, DType::F32, true},
                      Case{"tiny-random-qwen3moe.gguf", 2, 1, 1e-4}, Case{"tiny-random-qwen3moe.gguf", 2, 1, 1e-4, DType::F32, true},
                      Case{"tiny-random-qwen3moe.gguf", 1, 2, 1e-4}, Case{"tiny-random-qwen3moe.gguf", 2, 2, 1e-4},
                      Case{"tiny-random-deepseek2.gguf", 2, 1, 1e-4}, Case{"tiny-random-deepseek2.gguf", 2, 1, 1e-4, DType::F32, true},
                      Case{"tiny-random-deepseek2.gguf", 1, 2, 1e-4}, Case{"tiny-random-deepseek2.gguf", 2, 2, 1e-4, DType::F32, true}));

// Quantized experts (synth presets): tensor parallel inside experts cuts
// ffn_down_exps on Q8_0 blocks (tiny-mixtral: 64 rows per expert = 2 blocks);
// tiny-deepseek2-lite (attn_kv_b form, no q-LoRA, two shared experts, 32 rows
// per expert = 1 block) splits whole experts only. Activations are quantized
// per token as on one node; only the all-reduce's summation order differs.
INSTANTIATE_TEST_SUITE_P(
    QuantizedExperts, Distributed,
    ::testing::Values(Case{"synth:tiny-mixtral:q8_0", 2, 1, 1e-3}, Case{"synth:tiny-mixtral:q8_0", 2, 1, 1e-3, DType::F32, true},
                      Case{"synth:tiny-deepseek2-lite:q8_0", 2, 1, 1e-3, DType::F32, true},
                      Case{"synth:tiny-deepseek3:q4_0", 2, 2, 1e-3, DType::F32, true}));

// Compressed activations on the wire (parallel/wire_format.h) over tp, pp
// and both. Stated tolerances (max |logit diff| after the prompt, measured on
// these models 2026-12-01 in brackets): f16 1e-2 [0.004-0.008], bf16 5e-2
// [0.017-0.023], and for both the 24 greedy tokens equal the single node's
// (checked below); q8_0 0.4 [0.09-0.29], its greedy tokens may part at a
// step whose top-2 margin is within 10× that (the near-tie rule above).
// Models with experts (2026-12-06): f16 5e-2 [0.010-0.020], bf16 0.1
// [0.0024-0.062], all 24 greedy tokens as on one node; q8_0 0.4 on Mixtral
// and Qwen3-MoE [0.16-0.20], but not on the DeepSeek-V2 model, whose router
// picks other experts from its second token (max diff 2.4): the planner
// never chooses q8_0 for a model with experts (planner_test).
INSTANTIATE_TEST_SUITE_P(
    WireTypes, Distributed,
    ::testing::Values(Case{"stories260K.gguf", 2, 1, 1e-2, DType::F16}, Case{"stories260K.gguf", 2, 2, 1e-2, DType::F16},
                      Case{"stories260K.gguf", 2, 1, 5e-2, DType::BF16}, Case{"stories260K.gguf", 1, 2, 5e-2, DType::BF16},
                      Case{"stories260K.gguf", 2, 1, 0.4, DType::Q8_0}, Case{"stories260K.gguf", 2, 2, 0.4, DType::Q8_0},
                      Case{"tiny-random-llama31.gguf", 2, 1, 1e-2, DType::F16},
                      Case{"tiny-random-llama31.gguf", 2, 1, 0.4, DType::Q8_0},
                      Case{"tiny-random-qwen3.gguf", 2, 2, 0.4, DType::Q8_0},
                      Case{"stories260K-Q4_0.gguf", 2, 1, 0.4, DType::Q8_0},
                      Case{"tiny-random-qwen3moe.gguf", 2, 1, 5e-2, DType::F16},
                      Case{"tiny-random-qwen3moe.gguf", 2, 1, 0.4, DType::Q8_0},
                      Case{"tiny-random-deepseek2.gguf", 2, 1, 5e-2, DType::F16, true},
                      Case{"tiny-random-deepseek2.gguf", 2, 1, 0.1, DType::BF16},
                      Case{"tiny-random-mixtral.gguf", 2, 1, 0.4, DType::Q8_0},
                      Case{"synth:tiny-mixtral:q8_0", 2, 1, 0.1, DType::BF16}));

// ≥ 1k prompt tokens through chunked prefill (chunks of 128), hybrid layout.
TEST(DistributedLong, ChunkedPrefillOfLongPrompt) {
  const auto j = run_case({"stories260K.gguf", 2, 2, 2e-4}, 1100, 8, 128);
  ASSERT_FALSE(j.is_null());
  std::printf("  %d/8 greedy tokens as on one node, max |logit diff| %.3g\n", j["agree"].get<int>(),
              j["max_diff"].get<double>());
  EXPECT_LE(j["max_diff"].get<double>(), 2e-4);
  if (j["agree"].get<int>() < 8) {
    EXPECT_LT(j["first_mismatch_margin"].get<double>(), 2e-3) << j.dump();
  }
}

}  // namespace
}  // namespace shardlm::parallel
