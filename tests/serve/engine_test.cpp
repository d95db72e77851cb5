// What batching guarantees underneath the scheduler, and LocalEngine's
// contract. A sequence's logits are NOT the same bits alone and among other
// sequences' entries: one decode token goes through matmul's 1–3-token path,
// a crowded step through the tiled prefill path, and the two sum in different
// orders. What holds (and is tested): the greedy token is the same and the
// logits agree to a small relative error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "serve/local_engine.h"
#include "test_paths.h"

namespace shardlm::serve {
namespace {

const std::string kModels = shardlm::test_paths::models_dir();

class BatchComposition : public ::testing::TestWithParam<std::string> {};

// Sequence 0 reads a prompt and decodes one token; alone, then with 15 other
// sequences' entries around it in the same forward calls.
TEST_P(BatchComposition, GreedyTokenDoesNotDependOnTheOtherEntries) {
  auto file = gguf::File::open(kModels + "/" + GetParam());
  ModelOptions o;
  o.n_ctx = 64;
  o.n_seq = 16;
  o.n_batch = 64;
  const std::vector<TokenId> prompt = {1, 30, 40, 50, 60, 70};
  const auto run = [&](bool crowded) {
    Model m(*file, o);
    Batch b;
    const auto others = [&](int32_t pos) {
      for (int32_t s = 1; s < 16 && crowded; ++s) b.add(s, pos, TokenId(100 + s + pos), true);
    };
    for (size_t i = 0; i < prompt.size(); ++i) b.add(0, int32_t(i), prompt[i], i + 1 == prompt.size());
    others(0);
    m.forward(b);
    std::vector<float> out(m.logits(0).begin(), m.logits(0).end());
    b.clear();
    b.add(0, int32_t(prompt.size()), 200, true);
    others(1);
    m.forward(b);
    out.insert(out.end(), m.logits(0).begin(), m.logits(0).end());
    return out;
  };
  const auto alone = run(false), crowded = run(true);
  ASSERT_EQ(alone.size(), crowded.size());
  const size_t n_vocab = alone.size() / 2;
  float max_abs = 0, max_diff = 0;
  for (size_t i = 0; i < alone.size(); ++i) {
    max_abs = std::max(max_abs, std::fabs(alone[i]));
    max_diff = std::max(max_diff, std::fabs(alone[i] - crowded[i]));
  }
  EXPECT_LE(max_diff, 2e-3f * max_abs) << "largest logit " << max_abs;
  for (size_t step = 0; step < 2; ++step) {
    const std::span<const float> a(alone.data() + step * n_vocab, n_vocab), c(crowded.data() + step * n_vocab, n_vocab);
    EXPECT_EQ(argmax(a), argmax(c)) << "step " << step;
  }
  RecordProperty("max_logit_difference", std::to_string(max_diff));
}

INSTANTIATE_TEST_SUITE_P(Models, BatchComposition,
                         ::testing::Values("stories260K.gguf", "stories260K-Q8_0.gguf", "stories260K-Q4_0.gguf",
                                           "tiny-random-llama-kq-mixed.gguf"),
                         [](const auto& info) {
                           std::string n = info.param.substr(0, info.param.find(".gguf"));
                           for (char& c : n) if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

TEST(LocalEngine, StepReturnsOneTokenPerSamplingEntryAndChecksSlots) {
  auto file = gguf::File::open(kModels + "/stories260K.gguf");
  ModelOptions o;
  o.n_ctx = 32;
  o.n_seq = 2;
  o.n_batch = 16;
  LocalEngine e(*file, o);
  SamplerParams greedy;
  greedy.temperature = 0;
  const std::vector<StepEntry> step = {{0, 0, 1, false}, {0, 1, 30, true}, {1, 0, 1, true}};
  EXPECT_THROW(e.step(step), Error) << "slots are not live yet";
  e.add(0, greedy, {});
  e.add(1, greedy, {});
  EXPECT_THROW(e.add(1, greedy, {}), Error);
  const auto out = e.step(step);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].slot, 0);
  EXPECT_EQ(out[1].slot, 1);
  e.free(1);
  EXPECT_THROW(e.step(std::vector<StepEntry>{{1, 1, out[1].token, true}}), Error);
  EXPECT_THROW(e.add(2, greedy, {}), Error);
}

}  // namespace
}  // namespace shardlm::serve
