// Several sequences in flight through a pipeline (micro-batches), and seeded
// sampling with the vocabulary split: both against the single-node engine.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <tuple>

#include "../comm/rank_harness.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "model/sampler.h"
#include "parallel/distributed_session.h"
#include "parallel/step_message.h"
#include "step_driver.h"
#include "test_paths.h"

namespace shardlm::parallel {
namespace {

using comm::testing::describe;
using comm::testing::run_ranks;


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
    auto file = gguf::File::open(test_paths::kStoriesModel);
    DistributedSessionOptions o;
    o.n_ctx = 128;
    o.n_seq = int64_t(prompts.size());
    DistributedSession s(comm.shared_from_this(), uniform_plan(*file, tp, pp), *file, o);
    if (comm.rank() != 0) {
      while (s.serve()) {
      }
      return "served";
    }
    const auto got = testing::generate_steps(s, prompts, params, n);
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

// Sequences that start and end at different steps: B's prompt is read in
// chunks of 2 while A decodes, then A's slot is freed and taken by C, whose
// prompt starts with A's prompt (kept in the cache: only the rest is run).
// Penalties make the kept tokens matter to the sampler. Each equals the
// single node run alone.
std::string run_staggered(int tp, int pp) {
  auto outcomes = run_ranks(tp * pp, [&](comm::Communicator& comm) -> std::string {
    auto file = gguf::File::open(test_paths::kStoriesModel);
    DistributedSessionOptions o;
    o.n_ctx = 128;
    o.n_seq = 2;
    o.n_batch = 8;
    DistributedSession s(comm.shared_from_this(), uniform_plan(*file, tp, pp), *file, o);
    if (comm.rank() != 0) {
      while (s.serve()) {
      }
      return "served";
    }
    SamplerParams p;
    p.temperature = 0;
    p.repeat_penalty = 1.5f;
    p.frequency_penalty = 0.3f;
    const std::vector<TokenId> a = kPrompts[0], b = kPrompts[2];
    std::vector<TokenId> c = a;
    c.insert(c.end(), {75, 300, 9});
    std::vector<TokenId> got_a, got_b, got_c;
    Batch step;
    s.add(0, p, {});
    for (size_t i = 0; i < a.size(); ++i) step.add(0, int32_t(i), a[i], i + 1 == a.size());
    got_a.push_back(s.step(step).at(0).token);
    s.add(1, p, {});
    size_t b_fed = 0;
    while (got_b.empty() || got_b.size() < 6) {
      step.clear();
      if (got_a.size() < 8) step.add(0, int32_t(a.size() + got_a.size() - 1), got_a.back(), true);
      if (b_fed < b.size()) {
        for (size_t k = 0; k < 2 && b_fed < b.size(); ++k, ++b_fed)
          step.add(1, int32_t(b_fed), b[b_fed], b_fed + 1 == b.size());
      } else {
        step.add(1, int32_t(b.size() + got_b.size() - 1), got_b.back(), true);
      }
      for (const auto& t : s.step(step)) (t.slot == 0 ? got_a : got_b).push_back(t.token);
    }
    s.free(0);
    s.add(0, p, std::span(a));
    step.clear();
    for (size_t i = a.size(); i < c.size(); ++i) step.add(0, int32_t(i), c[i], i + 1 == c.size());
    got_c.push_back(s.step(step).at(0).token);
    while (got_c.size() < 6) {
      step.clear();
      step.add(0, int32_t(c.size() + got_c.size() - 1), got_c.back(), true);
      got_c.push_back(s.step(step).at(0).token);
    }
    s.shutdown();
    std::string report;
    for (const auto& [name, prompt, got] : {std::tuple{"A", a, got_a}, {"B", b, got_b}, {"C", c, got_c}}) {
      const auto want = single_node(*file, prompt, int(got.size()), p);
      if (got != want) report += fmt::format("{}: got {} want {}; ", name, fmt::join(got, " "), fmt::join(want, " "));
    }
    return report.empty() ? "ok" : report;
  });
  for (const auto& o : outcomes)
    if (!o.ok()) return describe(outcomes);
  return outcomes[0].output;
}

TEST(StepEngine, StaggeredSequencesAndKeptPrefixThroughTwoStages) { EXPECT_EQ(run_staggered(1, 2), "ok"); }
TEST(StepEngine, StaggeredSequencesAndKeptPrefixOverTensorParallel) { EXPECT_EQ(run_staggered(2, 1), "ok"); }

TEST(StepMessage, RoundTripAndRejection) {
  StepMessage m;
  SamplerParams p;
  p.seed = 99;
  p.top_k = 7;
  p.logit_bias = {{3, -100.0f}, {31, 2.5f}};
  m.ops.push_back({true, 1, p, {5, 6}});
  m.ops.push_back({false, 0, {}, {}});
  m.entries.add(1, 2, 7, true);
  m.entries.add(1, 3, 8, false);
  const auto bytes = m.encode();
  const auto back = StepMessage::decode(bytes, 2, 8, 16, 32, "test");
  ASSERT_EQ(back.ops.size(), 2u);
  EXPECT_TRUE(back.ops[0].add);
  EXPECT_EQ(back.ops[0].params.seed, 99u);
  EXPECT_EQ(back.ops[0].params.top_k, 7);
  EXPECT_EQ(back.ops[0].params.logit_bias, p.logit_bias);
  EXPECT_EQ(back.ops[0].recent, (std::vector<TokenId>{5, 6}));
  EXPECT_FALSE(back.ops[1].add);
  ASSERT_EQ(back.entries.size(), 2u);
  EXPECT_EQ(back.entries.entries[1].token, 8);
  EXPECT_FALSE(back.entries.entries[1].want_logits);
  // Truncated anywhere, a slot, position or token out of range, trailing bytes.
  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_THROW(StepMessage::decode(std::span(bytes).first(n), 2, 8, 16, 32, "test"), Error) << n;
  EXPECT_THROW(StepMessage::decode(bytes, 1, 8, 16, 32, "test"), Error);   // slot 1 of 1
  EXPECT_THROW(StepMessage::decode(bytes, 2, 8, 3, 32, "test"), Error);    // position 3 of 3
  EXPECT_THROW(StepMessage::decode(bytes, 2, 8, 16, 8, "test"), Error);    // token 8 of 8
  EXPECT_THROW(StepMessage::decode(bytes, 2, 8, 16, 31, "test"), Error);   // biased token 31 of 31
  StepMessage unordered = m;
  unordered.ops[0].params.logit_bias = {{31, 1.0f}, {3, 1.0f}};
  EXPECT_THROW(StepMessage::decode(unordered.encode(), 2, 8, 16, 32, "test"), Error);
  EXPECT_THROW(StepMessage::decode(bytes, 2, 1, 16, 32, "test"), Error);   // 2 entries, 1 allowed
  auto longer = bytes;
  longer.push_back(0);
  EXPECT_THROW(StepMessage::decode(longer, 2, 8, 16, 32, "test"), Error);
  StepBuilder builder(2, 8, 16, 32);
  EXPECT_THROW(builder.take(StepKind::Step, m.entries), Error);  // slot 1 not live
  builder.add(1, p, {});
  Batch two;
  two.add(1, 0, 1, true);
  two.add(1, 1, 1, true);
  EXPECT_THROW(builder.take(StepKind::Step, two), Error);  // two sampling entries for one slot
}

TEST(StepMessage, SplitBySequenceKeepsSlotsTogether) {
  Batch b;
  b.add(0, 5, 1, true);
  b.add(1, 9, 1, true);
  for (int i = 0; i < 6; ++i) b.add(2, i, 1, i == 5);
  b.add(3, 4, 1, true);
  const auto parts = split_by_sequence(b, 2);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].size() + parts[1].size(), b.size());
  for (const auto& part : parts)
    for (const auto& e : part.entries)
      for (const auto& other : parts) {
        if (&other == &part) continue;
        for (const auto& f : other.entries) EXPECT_NE(e.seq, f.seq);
      }
  EXPECT_EQ(parts[0].size(), 2u);  // the 6-entry prompt of slot 2 goes with the last decode entry
  EXPECT_LE(split_by_sequence(b, 8).size(), 4u);  // never more parts than slots
  Batch decode;
  for (int s = 0; s < 4; ++s) decode.add(s, 3, 1, true);
  EXPECT_EQ(split_by_sequence(decode, 2)[0].size(), 2u);
  EXPECT_EQ(split_by_sequence(decode, 4).size(), 4u);
  EXPECT_EQ(split_by_sequence(b, 1).size(), 1u);
  EXPECT_TRUE(split_by_sequence(Batch{}, 2).empty());
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
  b.local_candidates(std::vector<float>{-1, -1}, &all[1]);
  EXPECT_EQ(all[1].id, 3);  // equal logits inside a slice: the lowest id
  EXPECT_EQ(all[1].logit, -1.0f);
}

}  // namespace
}  // namespace shardlm::parallel
