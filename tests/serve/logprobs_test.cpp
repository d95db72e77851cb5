// Log-probabilities from the request to the response: parsing of both API
// forms, the engine (greedy output unchanged, only slots that ask), the
// scheduler (entries with their text, dropped with a swallowed stop string)
// and the response objects.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/text.h"
#include "gguf/gguf.h"
#include "serve/api_request.h"
#include "serve/local_engine.h"
#include "serve/openai_format.h"
#include "serve/request_error.h"
#include "serve/scheduler.h"
#include "test_paths.h"

namespace shardlm::serve {
namespace {

using Json = nlohmann::ordered_json;


TEST(LogprobsRequest, ChatAndCompletionForms) {
  EXPECT_EQ(parse_chat_request(Json::parse(R"({"messages": []})")).sampling.logprobs, -1);
  EXPECT_EQ(parse_chat_request(Json::parse(R"({"messages": [], "logprobs": true})")).sampling.logprobs, 0);
  EXPECT_EQ(parse_chat_request(Json::parse(R"({"messages": [], "logprobs": true, "top_logprobs": 20})")).sampling.logprobs, 20);
  EXPECT_EQ(parse_chat_request(Json::parse(R"({"messages": [], "logprobs": false})")).sampling.logprobs, -1);
  EXPECT_EQ(parse_completion_request(Json::parse(R"({"prompt": "x", "logprobs": 3})")).sampling.logprobs, 3);
  EXPECT_EQ(parse_completion_request(Json::parse(R"({"prompt": "x", "logprobs": null})")).sampling.logprobs, -1);
  for (const char* bad : {R"({"prompt": "x", "logprobs": 21})", R"({"prompt": "x", "logprobs": true})",
                          R"({"prompt": "x", "logprobs": -1})"}) {
    try {
      parse_completion_request(Json::parse(bad));
      ADD_FAILURE() << bad << " was accepted";
    } catch (const RequestError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.param(), "logprobs");
    }
  }
}

struct LogprobsFixture {
  std::unique_ptr<gguf::File> file = gguf::File::open(test_paths::kStoriesModel);
  std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(*file);
  std::unique_ptr<LocalEngine> engine;
  std::unique_ptr<Scheduler> sched;
  explicit LogprobsFixture(int slots) {
    ModelOptions o;
    o.n_ctx = 128;
    o.n_seq = slots;
    o.n_batch = 64 + slots;
    engine = std::make_unique<LocalEngine>(*file, o);
    sched = std::make_unique<Scheduler>(*engine, *tok, SchedulerOptions{});
  }
  GenerationRequest greedy(int32_t logprobs, int64_t max_tokens, std::vector<std::string> stop = {}) const {
    GenerationRequest r;
    r.prompt = tok->encode("Once upon a time", true, false);
    r.sampling.temperature = 0;
    r.sampling.logprobs = logprobs;
    r.max_tokens = max_tokens;
    r.stop = std::move(stop);
    return r;
  }
  // All chunks until the end: text and entries.
  RequestStream::Chunk run(const GenerationRequest& r) {
    auto s = sched->submit(r);
    RequestStream::Chunk all;
    while (sched->step()) {
      auto c = s->next(std::chrono::milliseconds(0));
      all.text += c.text;
      for (auto& e : c.logprobs) all.logprobs.push_back(std::move(e));
    }
    auto c = s->wait_all();
    all.text += c.text;
    for (auto& e : c.logprobs) all.logprobs.push_back(std::move(e));
    all.finish = c.finish;
    return all;
  }
};

TEST(LogprobsEngine, GreedyTokensUnchangedAndOnlyForSlotsThatAsk) {
  LogprobsFixture f(2);
  const auto prompt = f.tok->encode("The little dog", true, false);
  SamplerParams with, without;
  with.temperature = without.temperature = 0;
  with.logprobs = 3;
  f.engine->add(0, with, {});
  f.engine->add(1, without, {});
  std::vector<StepEntry> step;
  for (size_t i = 0; i < prompt.size(); ++i) {
    step.push_back({0, int32_t(i), prompt[i], i + 1 == prompt.size()});
    step.push_back({1, int32_t(i), prompt[i], i + 1 == prompt.size()});
  }
  for (int k = 0; k < 6; ++k) {
    const auto out = f.engine->step(step);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].token, out[1].token) << "asking for logprobs changed the greedy token";
    ASSERT_TRUE(out[0].logprobs);
    EXPECT_FALSE(out[1].logprobs);
    ASSERT_EQ(out[0].logprobs->top.size(), 3u);
    EXPECT_EQ(out[0].logprobs->top[0].id, out[0].token);
    EXPECT_LE(out[0].logprobs->logprob, 0.0f);
    const int32_t pos = int32_t(prompt.size()) + k;
    step = {{0, pos, out[0].token, true}, {1, pos, out[1].token, true}};
  }
}

TEST(LogprobsScheduler, OneEntryPerTokenWithItsTextAndNoneBeyondAStop) {
  LogprobsFixture f(1);
  const auto plain = f.run(f.greedy(-1, 30));
  const auto with = f.run(f.greedy(2, 30));
  EXPECT_EQ(with.text, plain.text) << "greedy output changed with logprobs on";
  EXPECT_TRUE(plain.logprobs.empty());
  ASSERT_EQ(with.logprobs.size(), 30u);
  std::string joined;
  for (const auto& e : with.logprobs) {
    joined += e.chosen.token;
    EXPECT_EQ(e.top.size(), 2u);
    EXPECT_EQ(e.top[0].token, e.chosen.token);
    EXPECT_EQ(e.top[0].logprob, e.chosen.logprob);
  }
  EXPECT_NE(joined.find(with.text.substr(1)), std::string::npos) << joined << " | " << with.text;

  // A stop string from the middle: the entries end with the last token whose text was sent.
  const std::string stop = with.text.substr(20, 5);
  const auto stopped = f.run(f.greedy(0, 30, {stop}));
  EXPECT_EQ(stopped.text, with.text.substr(0, with.text.find(stop)));
  ASSERT_LT(stopped.logprobs.size(), with.logprobs.size());
  ASSERT_FALSE(stopped.logprobs.empty());
  std::string sent;
  for (const auto& e : stopped.logprobs) sent += e.chosen.token;
  EXPECT_GE(sent.size() + 1, stopped.text.size()) << "the tokens of the sent text all have entries";
  EXPECT_LT(sent.size() - stopped.logprobs.back().chosen.token.size() + 1, stopped.text.size() + 1)
      << "an entry whose text was all swallowed by the stop string was sent";
  for (size_t i = 0; i < stopped.logprobs.size(); ++i)
    EXPECT_EQ(stopped.logprobs[i].chosen.logprob, with.logprobs[i].chosen.logprob);
}

TEST(LogprobsStopText, EntriesLeaveWithTheirTextAndDieWithASwallowedOne) {
  LogprobsFixture f(1);
  StopText t(*f.tok, {"big dog"});
  const auto ids = f.tok->encode("a big cat and a big dog ran", false, false);
  std::string sent, covered, last;
  size_t entries = 0;
  for (const TokenId id : ids) {
    const SampledLogprobs lp{-1.0f, {{id, -1.0f}}};
    auto out = t.push(id, &lp);
    sent += out.text;
    for (const auto& e : out.logprobs) {
      covered += e.chosen.token;
      last = e.chosen.token;
      EXPECT_EQ(e.top.at(0).token, e.chosen.token);
    }
    entries += out.logprobs.size();
    if (out.stopped) break;
    // Out only once all of its text is: the entries never run ahead of the text.
    EXPECT_EQ(sent.compare(0, covered.size(), covered), 0) << covered << " | " << sent;
  }
  EXPECT_EQ(sent, " a big cat and a ");
  // At the stop, the tokens whose text begins in what was sent go (" big",
  // whose space was sent); " dog", all swallowed, is dropped with its text.
  EXPECT_EQ(covered.compare(0, sent.size(), sent), 0) << covered;
  EXPECT_LT(covered.size() - last.size(), sent.size()) << covered;
  EXPECT_EQ(covered.find("dog"), std::string::npos) << covered;
  EXPECT_LT(entries, ids.size() - 1);
  StopText u(*f.tok, {});
  const SampledLogprobs lp{-1.0f, {}};
  size_t released = 0;
  for (const TokenId id : ids) released += u.push(id, &lp).logprobs.size();
  released += u.finish().logprobs.size();
  EXPECT_EQ(released, ids.size()) << "without a stop every token's entry goes out";
}

// text_offset indexes the returned text: a special token the text leaves out
// adds no character, and a character split over byte tokens counts once.
TEST(LogprobsStopText, EntriesCountTheCharactersOfTheText) {
  LogprobsFixture f(1);
  std::vector<TokenId> ids = f.tok->encode("h\xE6\x97\xA5\xE6\x9C\xAC", false, false);  // h日本
  ids.insert(ids.begin() + 1, f.tok->eos());
  StopText t(*f.tok, {});
  const SampledLogprobs lp{-1.0f, {}};
  std::string text;
  int64_t chars = 0;
  for (const TokenId id : ids) {
    const auto out = t.push(id, &lp);
    text += out.text;
    for (const auto& e : out.logprobs) chars += e.text_chars;
  }
  const auto rest = t.finish();
  text += rest.text;
  for (const auto& e : rest.logprobs) chars += e.text_chars;
  EXPECT_EQ(text.find("</s>"), std::string::npos) << text;
  EXPECT_EQ(chars, utf8_chars(text)) << text;
  EXPECT_GE(ids.size(), 8u) << "日本 is spelled in byte tokens";
}

TEST(LogprobsFormat, ChatContentAndLegacyCompletion) {
  const std::vector<LogprobEntry> entries = {{{" a", -0.25f}, {{" a", -0.25f}, {" b", -2.0f}}, 2},
                                             {{"\xC3\xA9", -1.5f}, {}, 1}};
  int64_t offset = 0;
  const Json chat = logprobs_json(ApiKind::Chat, entries, offset);
  ASSERT_EQ(chat["content"].size(), 2u);
  EXPECT_EQ(chat["content"][0]["token"], " a");
  EXPECT_EQ(chat["content"][0]["logprob"].get<float>(), -0.25f);
  EXPECT_EQ(chat["content"][0]["bytes"], Json::array({32, 97}));
  EXPECT_EQ(chat["content"][0]["top_logprobs"][1]["token"], " b");
  EXPECT_EQ(chat["content"][0]["top_logprobs"][1]["bytes"], Json::array({32, 98}));
  EXPECT_EQ(chat["content"][1]["bytes"], Json::array({0xC3, 0xA9}));
  EXPECT_TRUE(chat["content"][1]["top_logprobs"].empty());
  offset = 5;
  const Json legacy = logprobs_json(ApiKind::Completion, entries, offset);
  EXPECT_EQ(legacy["tokens"], Json::array({" a", "\xC3\xA9"}));
  EXPECT_EQ(legacy["token_logprobs"][1].get<float>(), -1.5f);
  EXPECT_EQ(legacy["top_logprobs"][0][" b"].get<float>(), -2.0f);
  EXPECT_EQ(legacy["text_offset"], Json::array({5, 7}));
  EXPECT_EQ(offset, 8);
  const Json whole = response_json({ApiKind::Chat, "id", 0, "m"}, " a\xC3\xA9", FinishReason::Stop, {}, chat);
  EXPECT_EQ(whole["choices"][0]["logprobs"], chat);
  EXPECT_TRUE(response_json({ApiKind::Chat, "id", 0, "m"}, "x", FinishReason::Stop, {})["choices"][0]["logprobs"].is_null());
}

}  // namespace
}  // namespace shardlm::serve
