// The scheduler over a LocalEngine on stories260K: batching does not change
// greedy outputs, stop strings are held back, prompts are read in chunks
// beside running streams, cancellation frees the slot, prefixes are reused;
// over a recording engine: a burst of requests starts decoding in one step.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "serve/local_engine.h"
#include "serve/scheduler.h"
#include "test_paths.h"

namespace shardlm::serve {
namespace {


struct Fixture {
  std::unique_ptr<gguf::File> file = gguf::File::open(test_paths::kStoriesModel);
  std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(*file);
  std::unique_ptr<LocalEngine> engine;
  std::unique_ptr<Scheduler> sched;

  Fixture(int slots, int64_t prefill_budget = 64, int64_t n_ctx = 256, int max_waiting = 64,
          bool batch_invariant = false) {
    ModelOptions o;
    o.batch_invariant = batch_invariant;
    o.n_ctx = n_ctx;
    o.n_seq = slots;
    o.n_batch = prefill_budget + slots;
    engine = std::make_unique<LocalEngine>(*file, o);
    SchedulerOptions so;
    so.prefill_budget = prefill_budget;
    so.max_waiting = max_waiting;
    sched = std::make_unique<Scheduler>(*engine, *tok, so);
  }
  GenerationRequest greedy(const std::string& text, int64_t max_tokens, std::vector<std::string> stop = {}) const {
    GenerationRequest r;
    r.prompt = tok->encode(text, true, false);
    r.sampling.temperature = 0;
    r.max_tokens = max_tokens;
    r.stop = std::move(stop);
    return r;
  }
  void drain() {
    for (int i = 0; i < 100000 && sched->step(); ++i) {
    }
  }
};

struct Result {
  std::string text;
  FinishReason finish;
  Usage usage;
};

Result collect(RequestStream& s) {
  auto c = s.wait_all();
  return {c.text, c.finish, s.usage()};
}

const std::vector<std::string> kPrompts = {
    "Once upon a time", "The little dog", "Lily and Tom went to the park", "One day, a big bird",
    "The sun was", "Tim had a red ball", "Mom said", "There was a cat who liked",
    "A boy named Sam", "The tree was very tall and", "She looked at the sky", "They played all day",
    "The fish swam", "Ben wanted a new toy", "In the garden there", "The old man smiled"};

TEST(Scheduler, GreedyOutputsDoNotDependOnBatching) {
  std::vector<Result> alone;
  {
    Fixture f(1);
    for (const auto& p : kPrompts) {
      auto s = f.sched->submit(f.greedy(p, 40));
      f.drain();
      alone.push_back(collect(*s));
    }
  }
  Fixture f(16, 7);  // a small prompt budget: prompt chunks mix with decode entries
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& p : kPrompts) streams.push_back(f.sched->submit(f.greedy(p, 40)));
  f.drain();
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    const Result r = collect(*streams[i]);
    EXPECT_EQ(r.text, alone[i].text) << "prompt " << i << ": " << kPrompts[i];
    EXPECT_EQ(r.finish, alone[i].finish);
    EXPECT_EQ(r.usage.completion_tokens, alone[i].usage.completion_tokens);
  }
  EXPECT_GT(alone[0].text.size(), 20u);
}

// Batch invariance (ModelOptions::batch_invariant): not only the greedy
// tokens but every log-probability is the same bits alone or among 15 other
// requests whose prompts are read in chunks beside it (stories260K: F32).
TEST(Scheduler, BatchInvariantLogprobsDoNotDependOnBatching) {
  const auto request = [](const Fixture& f, const std::string& p) {
    GenerationRequest r = f.greedy(p, 24);
    r.sampling.logprobs = 1;
    return r;
  };
  std::vector<std::vector<LogprobEntry>> alone;
  {
    Fixture f(1, 64, 256, 64, true);
    for (const auto& p : kPrompts) {
      auto s = f.sched->submit(request(f, p));
      f.drain();
      alone.push_back(s->wait_all().logprobs);
    }
  }
  Fixture f(16, 7, 256, 64, true);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& p : kPrompts) streams.push_back(f.sched->submit(request(f, p)));
  f.drain();
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    const auto got = streams[i]->wait_all().logprobs;
    ASSERT_EQ(got.size(), alone[i].size()) << kPrompts[i];
    ASSERT_FALSE(got.empty());
    for (size_t k = 0; k < got.size(); ++k) {
      EXPECT_EQ(got[k].chosen.token, alone[i][k].chosen.token) << kPrompts[i] << " token " << k;
      EXPECT_EQ(std::bit_cast<uint32_t>(got[k].chosen.logprob), std::bit_cast<uint32_t>(alone[i][k].chosen.logprob))
          << kPrompts[i] << " token " << k << ": " << got[k].chosen.logprob << " against " << alone[i][k].chosen.logprob;
    }
  }
}

TEST(Scheduler, StopStringEndsGenerationAndIsNeverSent) {
  Fixture f(1);
  auto s = f.sched->submit(f.greedy("Once upon a time", 40));
  f.drain();
  const std::string full = collect(*s).text;
  ASSERT_GT(full.size(), 30u);
  const std::string stop = full.substr(15, 6);  // spans several tokens
  const size_t at = full.find(stop);

  auto s2 = f.sched->submit(f.greedy("Once upon a time", 40, {"never appears", stop}));
  std::string streamed;
  while (f.sched->step()) {
    auto c = s2->next(std::chrono::milliseconds(0));
    streamed += c.text;
    EXPECT_EQ(full.compare(0, streamed.size(), streamed), 0) << "sent text is not a prefix of the full text";
    EXPECT_LE(streamed.size(), at) << "part of the stop string was sent";
  }
  const auto c = s2->wait_all();
  streamed += c.text;
  EXPECT_EQ(streamed, full.substr(0, at));
  EXPECT_EQ(c.finish, FinishReason::Stop);
}

TEST(Scheduler, StopTextHoldsBackAPossibleStart) {
  Fixture f(1);
  StopText t(*f.tok, {"big dog"});
  std::string sent;
  for (const TokenId id : f.tok->encode("a big cat and a big dog ran", false, false)) {
    const auto out = t.push(id);
    sent += out.text;
    if (out.stopped) break;
    EXPECT_EQ(sent.find("big d"), std::string::npos);
  }
  EXPECT_EQ(sent, " a big cat and a ");
}

TEST(Scheduler, ChunkedPrefillKeepsRunningStreamsDecoding) {
  Fixture f(2, 16, 512);
  auto a = f.sched->submit(f.greedy("Once upon a time", 200));
  while (a->usage().completion_tokens == 0) f.sched->step();
  std::string long_prompt;
  for (int i = 0; i < 30; ++i) long_prompt += "The little dog ran to the park. ";
  auto b = f.sched->submit(f.greedy(long_prompt, 4));
  const int64_t b_len = int64_t(f.tok->encode(long_prompt, true, false).size());
  ASSERT_GT(b_len, 100);
  int prefill_steps = 0;
  for (;;) {
    const int64_t before = a->usage().completion_tokens;
    f.sched->step();
    const auto [prompt_entries, decode_entries] = f.sched->last_step_entries();
    if (prompt_entries == 0) break;
    ++prefill_steps;
    EXPECT_LE(prompt_entries, 16);
    EXPECT_EQ(decode_entries, 1);
    EXPECT_EQ(a->usage().completion_tokens, before + 1) << "the running stream stalled during a prefill step";
  }
  EXPECT_EQ(prefill_steps, (b_len + 15) / 16);
  f.drain();
  EXPECT_EQ(b->wait_all().finish, FinishReason::Length);
}

// The step's prompt budget goes to the shortest remainder first: a short
// prompt arriving behind a long one is read in the first step, not after it.
TEST(Scheduler, ShortPromptIsNotQueuedBehindALongOnesChunks) {
  Fixture f(2, 8);
  std::string long_text = "Once upon a time";
  for (int i = 0; i < 8; ++i) long_text += " there was a little dog who liked to run";
  auto long_stream = f.sched->submit(f.greedy(long_text, 4));
  auto short_stream = f.sched->submit(f.greedy("Mom said", 4));
  ASSERT_GT(f.greedy(long_text, 4).prompt.size(), 40u);
  ASSERT_TRUE(f.sched->step());
  EXPECT_EQ(f.sched->last_step_entries(), std::make_pair(int64_t(8), int64_t(0)));
  EXPECT_EQ(short_stream->usage().completion_tokens, 1) << "the short prompt was read whole in the first step";
  EXPECT_EQ(long_stream->usage().completion_tokens, 0);
  f.drain();
  EXPECT_EQ(collect(*long_stream).usage.completion_tokens, 4);
  EXPECT_EQ(collect(*short_stream).usage.completion_tokens, 4);
}

TEST(Scheduler, CancellationFreesTheSlotWithinOneStep) {
  Fixture f(1);
  auto a = f.sched->submit(f.greedy("Once upon a time", 200));
  for (int i = 0; i < 3; ++i) f.sched->step();
  auto b = f.sched->submit(f.greedy("The little dog", 3));
  f.sched->step();
  EXPECT_EQ(f.sched->gauges().waiting, 1) << "one slot: b waits while a runs";
  a->cancel();
  f.sched->step();
  EXPECT_EQ(a->next(std::chrono::milliseconds(0)).finish, FinishReason::Cancelled);
  EXPECT_EQ(f.sched->gauges().waiting, 0);
  EXPECT_EQ(b->usage().prompt_tokens, int64_t(f.tok->encode("The little dog", true, false).size()));
  f.drain();
  EXPECT_EQ(b->wait_all().finish, FinishReason::Length);
}

TEST(Scheduler, PrefixOfAFreeSlotIsReused) {
  Fixture f(2);
  const std::string first = "Lily and Tom went to the park. They saw a big tree";
  auto a = f.sched->submit(f.greedy(first, 8));
  f.drain();
  EXPECT_EQ(collect(*a).usage.cached_tokens, 0);
  const auto first_tokens = f.tok->encode(first, true, false);
  const std::string second = first + " and a dog";
  auto b = f.sched->submit(f.greedy(second, 12));
  f.drain();
  const Result reused = collect(*b);
  EXPECT_GE(reused.usage.cached_tokens, int64_t(first_tokens.size()) - 1);

  Fixture fresh(1);
  auto c = fresh.sched->submit(fresh.greedy(second, 12));
  fresh.drain();
  const Result recomputed = collect(*c);
  EXPECT_EQ(recomputed.usage.cached_tokens, 0);
  EXPECT_EQ(reused.text, recomputed.text);
}

TEST(Scheduler, FullQueueAndOversizedPromptsAreRefused) {
  Fixture f(1, 64, 64, 2);
  f.sched->submit(f.greedy("a", 4));
  f.sched->submit(f.greedy("b", 4));
  EXPECT_THROW(f.sched->submit(f.greedy("c", 4)), QueueFull);
  std::string long_prompt;
  for (int i = 0; i < 40; ++i) long_prompt += "dog ran ";
  EXPECT_THROW(f.sched->submit(f.greedy(long_prompt, 4)), Error);
}

TEST(Scheduler, RunsOnItsOwnThread) {
  Fixture f(4);
  f.sched->start();
  std::vector<std::shared_ptr<RequestStream>> s;
  for (int i = 0; i < 6; ++i) s.push_back(f.sched->submit(f.greedy(kPrompts[size_t(i)], 10)));
  for (auto& x : s) EXPECT_EQ(x->wait_all().finish, FinishReason::Length);
}

}  // namespace
}  // namespace shardlm::serve

namespace shardlm::serve {
namespace {

// An engine whose steps fail while `failing` is set (a cluster that lost a worker).
class FlakyEngine final : public Engine {
 public:
  explicit FlakyEngine(Engine& inner) : inner_(inner) {}
  int n_slots() const override { return inner_.n_slots(); }
  int64_t n_ctx() const override { return inner_.n_ctx(); }
  int64_t max_step_entries() const override { return inner_.max_step_entries(); }
  int64_t n_vocab() const override { return inner_.n_vocab(); }
  void add(SlotId slot, const SamplerParams& p, std::span<const TokenId> kept) override { inner_.add(slot, p, kept); }
  void free(SlotId slot) override { inner_.free(slot); }
  std::vector<SampledToken> step(std::span<const StepEntry> entries) override {
    if (failing) throw Error("worker 10.0.0.2:7070 (rank 2) failed");
    return inner_.step(entries);
  }
  std::string health() const override { return failing ? "worker 10.0.0.2:7070 (rank 2) failed" : ""; }
  bool recover() override {  // a new engine: the caches are gone
    if (!failing || !recoverable) return false;
    failing = false;
    return true;
  }
  bool failing = false, recoverable = false;

 private:
  Engine& inner_;
};

TEST(Scheduler, FailedStepEndsRunningRequestsAndLaterStepsGoOn) {
  Fixture f(2);
  FlakyEngine flaky(*f.engine);
  Scheduler sched(flaky, *f.tok, {});
  auto a = sched.submit(f.greedy("Once upon a time", 8));
  auto b = sched.submit(f.greedy("The little dog", 8));
  sched.step();
  flaky.failing = true;
  sched.step();
  for (auto* s : {a.get(), b.get()}) {
    const auto c = s->wait_all();
    EXPECT_EQ(c.finish, FinishReason::Error);
    EXPECT_NE(c.error.find("10.0.0.2:7070"), std::string::npos) << c.error;
  }
  EXPECT_EQ(sched.health(), "worker 10.0.0.2:7070 (rank 2) failed");
  EXPECT_FALSE(sched.step());  // nothing left running, and no crash on the ended requests
  flaky.failing = false;
  auto c = sched.submit(f.greedy("Once upon a time", 4));
  while (sched.step()) {
  }
  EXPECT_EQ(collect(*c).finish, FinishReason::Length);
}

TEST(Scheduler, RecoveredEngineReusesNoPrefixOfTheOldCaches) {
  Fixture f(2);
  FlakyEngine flaky(*f.engine);
  Scheduler sched(flaky, *f.tok, {});
  // Both slots hold a prompt; the failed request below takes one of them.
  auto a = sched.submit(f.greedy("Once upon a time", 4));
  auto a2 = sched.submit(f.greedy("The little dog", 4));
  while (sched.step()) {
  }
  ASSERT_EQ(collect(*a).finish, FinishReason::Length);
  ASSERT_EQ(collect(*a2).finish, FinishReason::Length);
  auto b = sched.submit(f.greedy("Lily", 4));
  flaky.failing = true;
  sched.step();
  EXPECT_EQ(collect(*b).finish, FinishReason::Error);
  flaky.recoverable = true;
  auto c = sched.submit(f.greedy("Once upon a time", 4));
  auto c2 = sched.submit(f.greedy("The little dog", 4));
  while (sched.step()) {
  }
  EXPECT_TRUE(sched.health().empty());
  for (auto* s : {c.get(), c2.get()}) {
    EXPECT_EQ(collect(*s).finish, FinishReason::Length);
    EXPECT_EQ(s->usage().cached_tokens, 0);  // the prompts were in the old engine's caches only
  }
}

}  // namespace
}  // namespace shardlm::serve

namespace shardlm::serve {
namespace {

// An engine that runs no model: it records each step's entries and samples a fixed ordinary token.
class RecordingEngine final : public Engine {
 public:
  RecordingEngine(int slots, int64_t max_entries) : slots_(slots), max_entries_(max_entries) {}
  int n_slots() const override { return slots_; }
  int64_t n_ctx() const override { return 1024; }
  int64_t max_step_entries() const override { return max_entries_; }
  int64_t n_vocab() const override { return 512; }
  void add(SlotId, const SamplerParams&, std::span<const TokenId>) override {}
  void free(SlotId) override {}
  std::vector<SampledToken> step(std::span<const StepEntry> entries) override {
    steps.emplace_back(entries.begin(), entries.end());
    std::vector<SampledToken> out;
    for (const auto& e : entries)
      if (e.sample) out.push_back({e.slot, kToken, std::nullopt});
    return out;
  }
  static constexpr TokenId kToken = 300;  // an ordinary token of stories260K
  std::vector<std::vector<StepEntry>> steps;

 private:
  int slots_;
  int64_t max_entries_;
};

GenerationRequest prompt_of(int64_t length, int64_t max_tokens) {
  GenerationRequest r;
  r.prompt.assign(size_t(length), 100);
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  return r;
}

// Requests submitted together are read together: no step carries both prompt
// and decode entries, every stream's first token comes from the same step and
// they decode side by side to the end.
TEST(Scheduler, ABurstOfRequestsStartsDecodingTogether) {
  Fixture f(1);
  RecordingEngine engine(8, 16 + 8);
  SchedulerOptions so;
  so.prefill_budget = 16;
  so.prefill_step_ratio = 2;
  Scheduler sched(engine, *f.tok, so);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int64_t length : {30, 5, 12, 21}) streams.push_back(sched.submit(prompt_of(length, 6)));
  while (sched.step()) {
  }
  size_t first_sampling = engine.steps.size();
  for (size_t i = 0; i < engine.steps.size(); ++i) {
    int64_t prompt = 0, decode = 0, samples = 0;
    for (const auto& e : engine.steps[i]) {
      const bool is_decode = e.token == RecordingEngine::kToken;
      (is_decode ? decode : prompt) += 1;
      samples += e.sample;
    }
    EXPECT_FALSE(prompt > 0 && decode > 0) << "step " << i << " mixes prompt and decode entries";
    if (samples > 0 && first_sampling == engine.steps.size()) {
      first_sampling = i;
      EXPECT_EQ(samples, 4) << "every prompt finishes in the first step that samples";
    }
    if (i > first_sampling) {
      EXPECT_EQ(decode, i - first_sampling < 6 ? 4 : 0) << "step " << i;
    }
  }
  EXPECT_EQ(first_sampling, size_t((30 + 5 + 12 + 21 + 15) / 16 - 1));
  for (auto& s : streams) EXPECT_EQ(collect(*s).usage.completion_tokens, 6);
}

// Without the cohort (cohort_steps 0) the shortest prompt decodes beside the others' chunks.
TEST(Scheduler, WithoutACohortTheFirstPromptDecodesBesideTheOthers) {
  Fixture f(1);
  RecordingEngine engine(8, 16 + 8);
  SchedulerOptions so;
  so.prefill_budget = 16;
  so.cohort_steps = 0;
  Scheduler sched(engine, *f.tok, so);
  for (int64_t length : {30, 5, 12, 21}) sched.submit(prompt_of(length, 6));
  ASSERT_TRUE(sched.step());
  EXPECT_EQ(engine.steps[0].size(), 16u);
  EXPECT_TRUE(engine.steps[0][4].sample) << "the 5-token prompt samples in the first step";
  ASSERT_TRUE(sched.step());
  EXPECT_EQ(sched.last_step_entries().second, 1) << "and decodes beside the others' chunks";
  EXPECT_GT(sched.last_step_entries().first, 0);
  while (sched.step()) {
  }
}

// A burst reaching the scheduler's own thread while it is idle is gathered
// into one first step (the requests arrive within burst_gap of each other).
TEST(Scheduler, BurstOnAnIdleEngineIsGatheredIntoOneStep) {
  Fixture f(1);
  RecordingEngine engine(8, 64 + 8);
  SchedulerOptions so;
  so.prefill_budget = 64;
  so.burst_gap = std::chrono::milliseconds(500);  // generous: a loaded CI machine may sleep long
  so.burst_max = std::chrono::seconds(5);
  Scheduler sched(engine, *f.tok, so);
  sched.start();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 3; ++i) {
    streams.push_back(sched.submit(prompt_of(10, 2)));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (auto& s : streams) EXPECT_EQ(s->wait_all().finish, FinishReason::Length);
  ASSERT_FALSE(engine.steps.empty());
  EXPECT_EQ(engine.steps[0].size(), 30u) << "the first step read all three prompts";
}

}  // namespace
}  // namespace shardlm::serve
