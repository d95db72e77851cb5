// Log-probabilities with the vocabulary split (parallel/sharded_sampler.h):
// the same top lists and, within 1e-4, the same values as one node, over 2
// and 3 slices, through the step engine on tp 2, tp 3 and pp 2 (where they
// travel back as encoded tokens), and the token message's checks.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <random>

#include "../comm/rank_harness.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "model/sampler.h"
#include "parallel/distributed_session.h"
#include "parallel/sharded_sampler.h"
#include "parallel/step_message.h"
#include "test_paths.h"

namespace shardlm::parallel {
namespace {

using comm::testing::describe;
using comm::testing::run_ranks;

constexpr float kTolerance = 1e-4f;

// "" when equal within kTolerance with the same ids; else what differs.
std::string compare(const SampledLogprobs& got, const SampledLogprobs& want) {
  if (std::fabs(got.logprob - want.logprob) > kTolerance) return fmt::format("logprob {} vs {}", got.logprob, want.logprob);
  if (got.top.size() != want.top.size()) return fmt::format("{} top entries vs {}", got.top.size(), want.top.size());
  for (size_t i = 0; i < got.top.size(); ++i)
    if (got.top[i].id != want.top[i].id || std::fabs(got.top[i].logprob - want.top[i].logprob) > kTolerance)
      return fmt::format("top {}: {} ({}) vs {} ({})", i, got.top[i].id, got.top[i].logprob, want.top[i].id, want.top[i].logprob);
  return "";
}

std::vector<Range> even_slices(int64_t n, int parts) {
  std::vector<Range> r;
  for (int i = 0; i < parts; ++i) r.push_back({n * i / parts, n * (i + 1) / parts});
  return r;
}

// Every rank's sampler over its slice, the exchange done by hand.
SampledLogprobs sharded(const SamplerParams& p, const std::vector<float>& logits, int parts, TokenId* picked) {
  const auto slices = even_slices(int64_t(logits.size()), parts);
  std::vector<std::unique_ptr<ShardedSampler>> s;
  for (int i = 0; i < parts; ++i) s.push_back(std::make_unique<ShardedSampler>(p, slices, i));
  const auto slice = [&](int i) {
    return std::span(logits).subspan(size_t(slices[size_t(i)].begin), size_t(slices[size_t(i)].size()));
  };
  std::vector<Candidate> cand(s[0]->per_rank() * size_t(parts));
  for (int i = 0; i < parts; ++i) s[size_t(i)]->local_candidates(slice(i), &cand[size_t(i) * s[0]->per_rank()]);
  *picked = s[0]->choose(cand);
  std::vector<LogprobPart> lp;
  for (int i = 0; i < parts; ++i) lp.push_back(s[size_t(i)]->local_logprobs(slice(i), *picked));
  return s[size_t(parts - 1)]->merge_logprobs(lp, *picked);
}

// One node's report, checked against every slicing; returns the picked token.
TokenId check_slicings(const std::vector<float>& logits, const SamplerParams& p) {
  Sampler one(p, int64_t(logits.size()));
  SampledLogprobs want;
  const TokenId want_token = one.sample(logits, &want);
  for (const int parts : {1, 2, 3}) {
    TokenId token = -1;
    const auto got = sharded(p, logits, parts, &token);
    EXPECT_EQ(token, want_token) << parts << " slices";
    EXPECT_EQ(compare(got, want), "") << parts << " slices, temperature " << p.temperature;
    if (parts == 1) {
      EXPECT_EQ(got.logprob, want.logprob) << "one slice is the single node's bits";
    }
  }
  return want_token;
}

TEST(ShardedLogprobs, TwoAndThreeSlicesMatchOneNode) {
  std::mt19937 gen(3);
  std::normal_distribution<float> d(0.0f, 5.0f);
  std::vector<float> logits(1000);
  for (float& x : logits) x = d(gen);
  logits[10] = logits[700] = logits[990] = 30.0f;  // a tie across slices: lowest id first
  SamplerParams p;
  p.top_k = 5;
  p.seed = 9;
  p.logprobs = 6;
  for (const float temperature : {0.0f, 0.8f}) {
    p.temperature = temperature;
    check_slicings(logits, p);
  }
  p.temperature = 0;
  logits[990] = 31.0f;  // the pick in the last slice: its raw logit comes from that rank
  EXPECT_EQ(check_slicings(logits, p), 990);
}

// Each slice biases its own ids; the chooser, whose logits are candidates, none.
TEST(ShardedLogprobs, LogitBiasAcrossSlicesMatchesOneNode) {
  std::mt19937 gen(5);
  std::normal_distribution<float> d(0.0f, 5.0f);
  std::vector<float> logits(1000);
  for (float& x : logits) x = d(gen);
  logits[20] = 40.0f;
  SamplerParams p;
  p.top_k = 8;
  p.seed = 4;
  p.logprobs = 2;
  p.logit_bias = {{1, 3.0f}, {20, -100.0f}, {650, 60.0f}, {999, 1.0f}};
  for (const float temperature : {0.0f, 0.8f}) {
    p.temperature = temperature;
    EXPECT_EQ(check_slicings(logits, p), 650) << "temperature " << temperature;
  }
}

TEST(ShardedLogprobs, TokenMessageRoundTripAndRejection) {
  std::vector<SlotToken> tokens(2);
  tokens[0] = {1, 42, std::nullopt};
  tokens[1] = {0, 7, SampledLogprobs{-0.5f, {{7, -0.5f}, {3, -1.25f}}}};
  const auto bytes = encode_tokens(tokens);
  const auto back = decode_tokens(bytes, 2, 100, "test");
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].token, 42);
  EXPECT_FALSE(back[0].logprobs);
  ASSERT_TRUE(back[1].logprobs);
  EXPECT_EQ(back[1].logprobs->top.size(), 2u);
  EXPECT_EQ(back[1].logprobs->top[1].id, 3);
  EXPECT_EQ(back[1].logprobs->top[1].logprob, -1.25f);
  EXPECT_THROW(decode_tokens(std::span(bytes).first(bytes.size() - 1), 2, 100, "test"), Error);  // cut short
  EXPECT_THROW(decode_tokens(bytes, 1, 100, "test"), Error);   // slot 1 of 1
  EXPECT_THROW(decode_tokens(bytes, 2, 10, "test"), Error);    // token 42 of 10
  auto positive = tokens;
  positive[1].logprobs->top[0].logprob = 0.5f;
  EXPECT_THROW(decode_tokens(encode_tokens(positive), 2, 100, "test"), Error);
  auto many = tokens;
  many[1].logprobs->top.assign(size_t(kMaxTopLogprobs) + 1, TokenLogprob{1, -1.0f});
  EXPECT_THROW(decode_tokens(encode_tokens(many), 2, 100, "test"), Error);
}


// Greedy generation with logprobs on tp × pp ranks against one node: "ok" or what differs.
std::string run_logprobs(int tp, int pp) {
  const std::vector<TokenId> prompt{1, 403, 407, 261};
  constexpr int kTokens = 8;
  SamplerParams p;
  p.temperature = 0;
  p.logprobs = 5;
  auto outcomes = run_ranks(tp * pp, [&](comm::Communicator& comm) -> std::string {
    auto file = gguf::File::open(test_paths::kStoriesModel);
    DistributedSessionOptions o;
    o.n_ctx = 64;
    o.n_seq = 2;
    DistributedSession s(comm.shared_from_this(), uniform_plan(*file, tp, pp), *file, o);
    if (comm.rank() != 0) {
      while (s.serve()) {
      }
      return "served";
    }
    ModelOptions mo;
    mo.n_ctx = 64;
    Model m(*file, mo);
    Sampler one(p, m.config().n_vocab);
    SamplerParams plain = p;
    plain.logprobs = -1;
    s.add(0, p, {});
    s.add(1, plain, {});  // a slot beside it that asks for none
    Batch b, mb;
    for (size_t i = 0; i < prompt.size(); ++i) {
      b.add(0, int32_t(i), prompt[i], i + 1 == prompt.size());
      b.add(1, int32_t(i), prompt[i], i + 1 == prompt.size());
      mb.add(0, int32_t(i), prompt[i], i + 1 == prompt.size());
    }
    std::string report;
    for (int k = 0; k < kTokens; ++k) {
      const auto got = s.step(b);
      m.forward(mb);
      SampledLogprobs want;
      const TokenId t = one.sample(m.logits(0), &want);
      if (got.size() != 2 || got[0].slot != 0 || got[0].token != t || !got[0].logprobs || got[1].logprobs ||
          got[1].token != t)
        return fmt::format("step {}: tokens or presence of logprobs differ", k);
      if (const auto d = compare(*got[0].logprobs, want); !d.empty()) report += fmt::format("step {}: {}; ", k, d);
      const int32_t pos = int32_t(prompt.size()) + k;
      b.clear();
      mb.clear();
      b.add(0, pos, t, true);
      b.add(1, pos, t, true);
      mb.add(0, pos, t, true);
    }
    s.shutdown();
    return report.empty() ? "ok" : report;
  });
  for (const auto& o : outcomes)
    if (!o.ok()) return describe(outcomes);
  return outcomes[0].output;
}

TEST(ShardedLogprobs, StepEngineOverTwoAndThreeShardsAndTwoStagesMatchesOneNode) {
  EXPECT_EQ(run_logprobs(2, 1), "ok");
  EXPECT_EQ(run_logprobs(3, 1), "ok");
  EXPECT_EQ(run_logprobs(1, 2), "ok");
}

}  // namespace
}  // namespace shardlm::parallel
