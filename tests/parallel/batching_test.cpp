// Several sequences in flight through a pipeline (micro-batches), and seeded
// sampling with the vocabulary split: both against the single-node engine.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>

#include "../comm/rank_harness.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "model/sampler.h"
#include "parallel/runtime.h"

namespace shardlm::parallel {
namespace {

using comm::testing::describe;
using comm::testing::run_ranks;

const std::string kStories = std::string(SHARDLM_SHARED_MODELS) + "/stories260K.gguf";

// Single node, one thread: `n` tokens after `prompt` with a Sampler.
std::vector<TokenId> single_node(const gguf::File& file, const std::vector<TokenId>& prompt, int n,
                                 const SamplerParams& params) {
  ModelOptions o;
  o.n_ctx = 128;
  Model m(file, o);
  Sampler sampler(params, m.config().n_vocab);
  Batch b;
  for (size_t i = 0; i < prompt.size(); ++i) {
    b.add(0, int32_t(i), prompt[i], i + 1 == prompt.size());
    sampler.accept(prompt[i]);
  }
  m.forward(b);
  std::vector<TokenId> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(sampler.sample(m.logits(0)));
    sampler.accept(out.back());
    b.clear();
    b.add(0, int32_t(prompt.size()) + i, out.back(), true);
    m.forward(b);
  }
  return out;
}

// Rank 0 generates for `prompts` on tp × pp ranks and returns "ok" or what differs.
std::string run(int tp, int pp, const std::vector<std::vector<TokenId>>& prompts, const SamplerParams& params,
                int n) {
  auto outcomes = run_ranks(tp * pp, [&](comm::Communicator& comm) -> std::string {
    auto file = gguf::File::open(kStories);
    RuntimeOptions o;
    o.n_ctx = 128;
    o.n_seq = int64_t(prompts.size());
    DistributedSession s(comm.shared_from_this(), uniform_plan(*file, tp, pp), *file, o);
    if (comm.rank() != 0) {
      s.serve();
      return "served";
    }
    GenerateRequest q;
    q.prompts = prompts;
    q.n_predict = n;
    q.sampling = params;
    std::vector<std::vector<TokenId>> got(prompts.size());
    s.generate(q, [&](int seq, TokenId t) { got.at(size_t(seq)).push_back(t); });
    s.shutdown();
    std::string report;
    for (size_t i = 0; i < prompts.size(); ++i) {
      SamplerParams p = params;
      p.seed = params.seed + i;
      const auto want = single_node(*file, prompts[i], n, p);
      if (got[i] != want) report += fmt::format("sequence {}: got {} want {}; ", i, fmt::join(got[i], " "),
                                                fmt::join(want, " "));
    }
    return report.empty() ? "ok" : report;
  });
  for (const auto& o : outcomes)
    if (!o.ok()) return describe(outcomes);
  return outcomes[0].output;
}

const std::vector<std::vector<TokenId>> kPrompts = {{1, 403, 407, 261}, {1, 75, 300}, {1, 9, 10, 11, 12, 13}, {1, 2}};

TEST(Batching, FourSequencesThroughTwoStages) {
  SamplerParams greedy;
  greedy.temperature = 0;
  EXPECT_EQ(run(1, 2, kPrompts, greedy, 12), "ok");
}

TEST(Batching, ThreeSequencesThroughHybridLayout) {
  SamplerParams greedy;
  greedy.temperature = 0;
  EXPECT_EQ(run(2, 2, {kPrompts[0], kPrompts[1], kPrompts[2]}, greedy, 10), "ok");
}

TEST(ShardedSampling, SeededTopKWithPenaltiesMatchesSingleNode) {
  SamplerParams p;
  p.temperature = 0.9f;
  p.top_k = 20;
  p.top_p = 0.95f;
  p.min_p = 0.02f;
  p.repeat_penalty = 1.3f;
  p.presence_penalty = 0.2f;
  p.seed = 42;
  EXPECT_EQ(run(3, 1, {kPrompts[0], kPrompts[1]}, p, 16), "ok");
}

TEST(ShardedSampling, NoTopKGathersWholeSlices) {
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 0.9f;
  p.seed = 7;
  EXPECT_EQ(run(2, 1, {kPrompts[2]}, p, 12), "ok");
}

TEST(ShardedSamplerUnit, CandidatesAndChoice) {
  SamplerParams greedy;
  greedy.temperature = 0;
  ShardedSampler a(greedy, {{0, 3}, {3, 5}}, 0), b(greedy, {{0, 3}, {3, 5}}, 1);
  std::vector<Candidate> all(2);
  a.local_candidates(std::vector<float>{1, 5, 2}, &all[0]);
  b.local_candidates(std::vector<float>{5, 0}, &all[1]);
  EXPECT_EQ(all[0].id, 1);
  EXPECT_EQ(all[1].id, 3);
  EXPECT_EQ(a.choose(all), 1);  // a tie goes to the lowest id, as on one node
  SamplerParams pen = greedy;
  pen.repeat_penalty = 2;
  ShardedSampler c(pen, {{0, 3}, {3, 5}}, 0);
  c.accept(1);
  c.local_candidates(std::vector<float>{1, 5, 2}, &all[0]);
  EXPECT_EQ(all[0].id, 1);
  EXPECT_EQ(all[0].logit, 2.5f);  // 5 / 2: token 1 was seen
  EXPECT_EQ(c.choose(all), 3);    // so rank 1's token 3 (5.0) wins
  EXPECT_THROW(c.local_candidates(std::vector<float>{1, 2}, &all[0]), Error);
}

}  // namespace
}  // namespace shardlm::parallel
