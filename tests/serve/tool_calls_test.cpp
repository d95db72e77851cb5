// Tool calls read from a reply in the form the model's chat template taught
// it: the forms of real templates, splitting and holding back, and the API's
// answers (whole and streamed) over a scripted engine whose model "replies"
// with a call.
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "chat/model_template.h"
#include "gguf/gguf.h"
#include "serve/http_server.h"
#include "serve/scheduler.h"
#include "serve/tool_calls.h"
#include "test_paths.h"
#include "tokenizer/vocab.h"

namespace shardlm::serve {
namespace {

using Json = nlohmann::ordered_json;

std::string chat_data(const std::string& name) {
  std::ifstream in(std::string(test_paths::chat_data_dir()) + "/" + name);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ToolCalls, TheFormOfRealTemplates) {
  for (const char* tagged : {"Qwen-Qwen2.5-7B-Instruct.jinja", "Qwen-Qwen3-0.6B.jinja", "Qwen-QwQ-32B.jinja"})
    EXPECT_EQ(tool_call_syntax(chat_data(tagged)), ToolCallSyntax::Tagged) << tagged;
  for (const char* bare : {"meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama-Llama-3.2-3B-Instruct.jinja",
                           "meta-llama-Llama-3.3-70B-Instruct.jinja"})
    EXPECT_EQ(tool_call_syntax(chat_data(bare)), ToolCallSyntax::BareJson) << bare;
  EXPECT_EQ(tool_call_syntax(chat_data("google-gemma-2-2b-it.jinja")), ToolCallSyntax::None);
}

TEST(ToolCalls, SplitsTaggedCallsFromTheContent) {
  const auto r = split_tool_calls(ToolCallSyntax::Tagged,
                                  "Let me look.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                                  "</tool_call>\n<tool_call>{\"name\": \"time\", \"arguments\": \"{\\\"tz\\\": 1}\"}</tool_call>");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "weather");
  EXPECT_EQ(Json::parse(r.calls[0].arguments), Json::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(r.calls[1].name, "time");
  EXPECT_EQ(Json::parse(r.calls[1].arguments), Json::parse(R"({"tz": 1})"));
  EXPECT_EQ(r.content, "Let me look.\n\n");
  // Not a call after all: the whole reply stays content, unchanged.
  for (const char* text : {"<tool_call>{\"name\": 3}</tool_call>", "<tool_call>not json</tool_call>", "just text"})
    EXPECT_TRUE(split_tool_calls(ToolCallSyntax::Tagged, text).calls.empty()) << text;
  EXPECT_EQ(split_tool_calls(ToolCallSyntax::Tagged, "<tool_call>not json").content, "<tool_call>not json");
}

TEST(ToolCalls, SplitsABareJsonCall) {
  const auto r = split_tool_calls(ToolCallSyntax::BareJson, " {\"name\": \"weather\", \"parameters\": {\"city\": \"Oslo\"}}");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "weather");
  EXPECT_EQ(Json::parse(r.calls[0].arguments), Json::parse(R"({"city": "Oslo"})"));
  EXPECT_TRUE(split_tool_calls(ToolCallSyntax::BareJson, "{\"a\": 1} and more").calls.empty());
  EXPECT_TRUE(split_tool_calls(ToolCallSyntax::None, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>").calls.empty());
}

TEST(ToolCalls, HoldsBackWhatMayBeginACall) {
  EXPECT_EQ(surely_content(ToolCallSyntax::Tagged, "Hello <tool"), 6u);
  EXPECT_EQ(surely_content(ToolCallSyntax::Tagged, "Hello <tool_call>{\"na"), 6u);
  EXPECT_EQ(surely_content(ToolCallSyntax::Tagged, "a < b"), 5u);
  EXPECT_EQ(surely_content(ToolCallSyntax::Tagged, "a <"), 2u);
  EXPECT_EQ(surely_content(ToolCallSyntax::BareJson, "  {\"name\""), 0u);
  EXPECT_EQ(surely_content(ToolCallSyntax::BareJson, "  "), 0u);
  EXPECT_EQ(surely_content(ToolCallSyntax::BareJson, "Sure, {"), 7u);
  EXPECT_EQ(surely_content(ToolCallSyntax::None, "<tool"), 5u);
}

// Replies with the tokens of `reply` then end of text, whatever the prompt.
class ScriptedEngine final : public Engine {
 public:
  ScriptedEngine(std::vector<TokenId> reply, int64_t n_vocab) : reply_(std::move(reply)), n_vocab_(n_vocab) {}
  int n_slots() const override { return 1; }
  int64_t n_ctx() const override { return 512; }
  int64_t max_step_entries() const override { return 512; }
  int64_t n_vocab() const override { return n_vocab_; }
  void add(SlotId, const SamplerParams&, std::span<const TokenId>) override { next_ = 0; }
  void free(SlotId) override {}
  std::vector<SampledToken> step(std::span<const StepEntry> entries) override {
    std::vector<SampledToken> out;
    for (const auto& e : entries)
      if (e.sample) out.push_back({e.slot, reply_[std::min(next_++, reply_.size() - 1)], std::nullopt});
    return out;
  }

 private:
  std::vector<TokenId> reply_;
  int64_t n_vocab_;
  size_t next_ = 0;
};

struct Server {
  std::unique_ptr<gguf::File> file = gguf::File::open(test_paths::kStoriesModel);
  std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(*file);
  tok::Vocabulary vocab = tok::Vocabulary::load(*file);
  chat::ModelTemplate tmpl{*file, vocab, std::string("{% for m in messages %}{{ m.content }}{% endfor %}"
                                                     "{# calls go in <tool_call></tool_call> #}")};
  std::unique_ptr<ScriptedEngine> engine;
  Metrics metrics;
  std::unique_ptr<Scheduler> sched;
  std::unique_ptr<HttpServer> http;
  std::thread listener;
  int port = 0;

  explicit Server(const std::string& reply) {
    auto ids = tok->encode(reply, false, false);
    ids.push_back(tok->eos());
    engine = std::make_unique<ScriptedEngine>(ids, tok->n_vocab());
    sched = std::make_unique<Scheduler>(*engine, *tok, SchedulerOptions{}, &metrics);
    ServerOptions o;
    o.chat_template = &tmpl;
    o.port = 0;
    o.model_id = "m";
    http = std::make_unique<HttpServer>(*sched, *tok, metrics, 512, o);
    port = http->bind();
    sched->start();
    listener = std::thread([this] { http->listen(); });
  }
  ~Server() {
    http->stop();
    listener.join();
  }
  httplib::Result post(const Json& body) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(20, 0);
    return c.Post("/v1/chat/completions", body.dump(), "application/json");
  }
};

const Json kTools = Json::parse(R"([{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}])");

Json request(bool stream, const Json& tools = kTools) {
  Json body{{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}}, {"stream", stream}};
  if (!tools.is_null()) body["tools"] = tools;
  return body;
}

TEST(ToolCalls, TheApiAnswersWithToolCalls) {
  Server s("<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>");
  const auto whole = s.post(request(false));
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 200) << whole->body;
  const Json j = Json::parse(whole->body);
  const Json& choice = j["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null()) << whole->body;
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << whole->body;
  const Json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_TRUE(call["id"].get<std::string>().starts_with("call_"));
  EXPECT_EQ(call["function"]["name"], "weather");
  EXPECT_EQ(Json::parse(call["function"]["arguments"].get<std::string>()), Json::parse(R"({"city": "Paris"})"));

  // Streamed: no content chunk shows the call's text; a delta carries the call, then finish_reason.
  const auto streamed = s.post(request(true));
  ASSERT_TRUE(streamed);
  EXPECT_EQ(streamed->body.find("<tool_call>"), std::string::npos) << streamed->body;
  Json delta_calls, finish;
  std::istringstream lines(streamed->body);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("data: {")) continue;
    const Json chunk = Json::parse(line.substr(6));
    const Json& c = chunk["choices"][0];
    if (c["delta"].contains("tool_calls")) delta_calls = c["delta"]["tool_calls"];
    if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
  }
  ASSERT_EQ(delta_calls.size(), 1u) << streamed->body;
  EXPECT_EQ(delta_calls[0]["index"], 0);
  EXPECT_EQ(delta_calls[0]["function"]["name"], "weather");
  EXPECT_EQ(finish, "tool_calls");

  // Without tools, or with tool_choice "none", the reply is text.
  for (Json body : {request(false, nullptr), request(false)}) {
    if (body.contains("tools")) body["tool_choice"] = "none";
    const auto r = s.post(body);
    ASSERT_TRUE(r);
    const Json t = Json::parse(r->body);
    EXPECT_EQ(t["choices"][0]["finish_reason"], "stop") << r->body;
    EXPECT_NE(t["choices"][0]["message"]["content"].get<std::string>().find("<tool_call>"), std::string::npos) << r->body;
  }
}

}  // namespace
}  // namespace shardlm::serve
