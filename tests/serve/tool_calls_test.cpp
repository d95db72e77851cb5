// Tool calls read from a reply in the form the model's chat template taught
// it: the forms of real templates, splitting and holding back, and the API's
// answers (whole and streamed) over a scripted engine whose model "replies"
// with a call.
#include <gtest/gtest.h>

#include "scripted_server.h"
#include "serve/tool_calls.h"
#include "test_paths.h"

namespace shardlm::serve {
namespace {

using Json = nlohmann::ordered_json;

using test_paths::chat_data;

TEST(ToolCalls, TheFormOfRealTemplates) {
  for (const char* tagged : {"Qwen-Qwen2.5-7B-Instruct.jinja", "Qwen-Qwen3-0.6B.jinja", "Qwen-QwQ-32B.jinja"})
    EXPECT_EQ(tool_call_syntax(chat_data(tagged)), ToolCallSyntax::Tagged) << tagged;
  for (const char* bare : {"meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama-Llama-3.2-3B-Instruct.jinja",
                           "meta-llama-Llama-3.3-70B-Instruct.jinja"})
    EXPECT_EQ(tool_call_syntax(chat_data(bare)), ToolCallSyntax::BareJson) << bare;
  for (const char* deepseek : {"deepseek-ai-DeepSeek-V3.1.jinja", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"})
    EXPECT_EQ(tool_call_syntax(chat_data(deepseek)), ToolCallSyntax::DeepSeek) << deepseek;
  for (const char* kimi : {"moonshotai-Kimi-K2.jinja", "Kimi-K2-Instruct.jinja"})
    EXPECT_EQ(tool_call_syntax(chat_data(kimi)), ToolCallSyntax::Kimi) << kimi;
  for (const char* mistral : {"mistralai-Mistral-Nemo-Instruct-2407.jinja", "Mistral-Small-3.2-24B-Instruct-2506.jinja"})
    EXPECT_EQ(tool_call_syntax(chat_data(mistral)), ToolCallSyntax::Mistral) << mistral;
  EXPECT_EQ(tool_call_syntax(chat_data("google-gemma-2-2b-it.jinja")), ToolCallSyntax::None);
}

// The calls of one reply as (name, arguments as JSON) pairs.
std::vector<std::pair<std::string, Json>> calls_of(const SplitReply& r) {
  std::vector<std::pair<std::string, Json>> out;
  for (const ToolCall& c : r.calls) out.emplace_back(c.name, Json::parse(c.arguments));
  return out;
}

const std::vector<std::pair<std::string, Json>> kWeatherAndTime = {{"weather", Json::parse(R"({"city": "Paris"})")},
                                                                   {"time", Json::parse(R"({"tz": 1})")}};

// Each form as its template writes an assistant's calls (tests/chat/data), two calls a reply.
TEST(ToolCalls, SplitsTheCallsOfDeepSeekKimiAndMistral) {
  const auto v31 = split_tool_calls(ToolCallSyntax::DeepSeek,
                                    "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜>"
                                    "<｜tool▁call▁begin｜>time<｜tool▁sep｜>{\"tz\": 1}<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  EXPECT_EQ(calls_of(v31), kWeatherAndTime);
  EXPECT_EQ(v31.content, "Checking.");
  const auto r1 = split_tool_calls(ToolCallSyntax::DeepSeek,
                                   "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n"
                                   "<｜tool▁call▁begin｜>function<｜tool▁sep｜>time\n```json\n{\"tz\": 1}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  EXPECT_EQ(calls_of(r1), kWeatherAndTime);
  EXPECT_EQ(r1.content, "");
  const auto kimi = split_tool_calls(ToolCallSyntax::Kimi,
                                     "<|tool_calls_section_begin|><|tool_call_begin|>functions.weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|>"
                                     "<|tool_call_begin|>functions.time:1<|tool_call_argument_begin|>{\"tz\": 1}<|tool_call_end|><|tool_calls_section_end|>");
  EXPECT_EQ(calls_of(kimi), kWeatherAndTime);
  const auto nemo = split_tool_calls(ToolCallSyntax::Mistral,
                                     "[TOOL_CALLS][{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"a1b2c3d4e\"}, "
                                     "{\"name\": \"time\", \"arguments\": {\"tz\": 1}}]");
  EXPECT_EQ(calls_of(nemo), kWeatherAndTime);
  const auto small = split_tool_calls(ToolCallSyntax::Mistral,
                                      "[TOOL_CALLS]weather[CALL_ID]a1b2c3d4e[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]time[ARGS]{\"tz\": 1}");
  EXPECT_EQ(calls_of(small), kWeatherAndTime);
  // Cut off by max_tokens after a whole call: the calls so far.
  EXPECT_EQ(split_tool_calls(ToolCallSyntax::Kimi, "<|tool_calls_section_begin|><|tool_call_begin|>functions.time:0<|tool_call_argument_begin|>{\"tz\": 1}").calls.size(), 1u);
  // Not calls after all: the reply stays content, unchanged.
  for (const auto& [syntax, text] : std::vector<std::pair<ToolCallSyntax, std::string>>{
           {ToolCallSyntax::DeepSeek, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>weather<｜tool▁sep｜>not json<｜tool▁call▁end｜>"},
           {ToolCallSyntax::DeepSeek, "<｜tool▁calls▁begin｜>"},
           {ToolCallSyntax::Kimi, "<|tool_calls_section_begin|><|tool_call_begin|>functions.weather:0{}<|tool_call_end|>"},
           {ToolCallSyntax::Mistral, "[TOOL_CALLS]weather{\"city\": 1}"},
           {ToolCallSyntax::Mistral, "[TOOL_CALLS][{\"name\": \"weather\"}]"},
           {ToolCallSyntax::Mistral, "[TOOL_CALLS][ARGS]{}"}}) {
    const auto r = split_tool_calls(syntax, text);
    EXPECT_TRUE(r.calls.empty()) << text;
    EXPECT_EQ(r.content, text);
  }
}

// A call ends after its JSON: a marker inside one of its strings is text, and
// text after the calls is content.
TEST(ToolCalls, ACallEndsAfterItsJson) {
  const auto tagged = split_tool_calls(ToolCallSyntax::Tagged,
                                       "<tool_call>{\"name\": \"say\", \"arguments\": {\"text\": \"a</tool_call>b\"}}</tool_call>");
  ASSERT_EQ(tagged.calls.size(), 1u);
  EXPECT_EQ(Json::parse(tagged.calls[0].arguments)["text"], "a</tool_call>b");
  const auto deepseek = split_tool_calls(
      ToolCallSyntax::DeepSeek,
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>say<｜tool▁sep｜>{\"text\": \"<｜tool▁call▁end｜>\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜> Done.");
  ASSERT_EQ(deepseek.calls.size(), 1u);
  EXPECT_EQ(Json::parse(deepseek.calls[0].arguments)["text"], "<｜tool▁call▁end｜>");
  EXPECT_EQ(deepseek.content, " Done.");
  const auto small = split_tool_calls(ToolCallSyntax::Mistral, "[TOOL_CALLS]weather[ARGS]{\"city\": \"Paris\"} I called it.");
  EXPECT_EQ(calls_of(small), (std::vector<std::pair<std::string, Json>>{kWeatherAndTime[0]}));
  EXPECT_EQ(small.content, " I called it.");
  const auto nemo = split_tool_calls(ToolCallSyntax::Mistral, "[TOOL_CALLS][{\"name\": \"time\", \"arguments\": {\"tz\": 1}}] then text");
  EXPECT_EQ(calls_of(nemo), (std::vector<std::pair<std::string, Json>>{kWeatherAndTime[1]}));
  EXPECT_EQ(nemo.content, " then text");
}

// Mistral's templates take back only ids of 9 letters and digits: the
// model's id is kept, a missing one is made up in that form.
TEST(ToolCalls, MistralCallsKeepOrGetATemplatesId) {
  const auto given = split_tool_calls(ToolCallSyntax::Mistral, "[TOOL_CALLS]weather[CALL_ID]a1b2c3d4e[ARGS]{}");
  ASSERT_EQ(given.calls.size(), 1u);
  EXPECT_EQ(given.calls[0].id, "a1b2c3d4e");
  const auto listed = split_tool_calls(ToolCallSyntax::Mistral, "[TOOL_CALLS][{\"name\": \"w\", \"arguments\": {}, \"id\": \"Z9y8X7w6V\"}]");
  ASSERT_EQ(listed.calls.size(), 1u);
  EXPECT_EQ(listed.calls[0].id, "Z9y8X7w6V");
  const auto made = split_tool_calls(ToolCallSyntax::Mistral, "[TOOL_CALLS]weather[ARGS]{}");
  ASSERT_EQ(made.calls.size(), 1u);
  EXPECT_EQ(made.calls[0].id.size(), 9u);
  EXPECT_TRUE(std::all_of(made.calls[0].id.begin(), made.calls[0].id.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)); }));
  EXPECT_TRUE(split_tool_calls(ToolCallSyntax::Kimi, "<|tool_call_begin|>functions.w:0<|tool_call_argument_begin|>{}").calls[0].id.empty());
}

TEST(ToolCalls, EachFormMarksItsCalls) {
  EXPECT_EQ(tool_call_markers(ToolCallSyntax::Mistral), (std::vector<std::string_view>{"[TOOL_CALLS]", "[CALL_ID]", "[ARGS]"}));
  EXPECT_EQ(tool_call_markers(ToolCallSyntax::Kimi).size(), 5u);
  EXPECT_EQ(tool_call_markers(ToolCallSyntax::DeepSeek).size(), 5u);
  EXPECT_TRUE(tool_call_markers(ToolCallSyntax::BareJson).empty());
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
  EXPECT_EQ(surely_content(ToolCallSyntax::Mistral, "Sure [TOOL_"), 5u);
  EXPECT_EQ(surely_content(ToolCallSyntax::Kimi, "ok<|tool_call_begin|>functions"), 2u);
  EXPECT_EQ(surely_content(ToolCallSyntax::Kimi, "ok <|tool_c"), 3u);
  EXPECT_EQ(surely_content(ToolCallSyntax::DeepSeek, "x<｜tool▁calls"), 1u);
}

const std::string kToolTemplate = "{% for m in messages %}{{ m.content }}{% endfor %}{# calls go in <tool_call></tool_call> #}";

const Json kTools = Json::parse(R"([{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}])");

Json request(bool stream, const Json& tools = kTools) {
  Json body{{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}}, {"stream", stream}};
  if (!tools.is_null()) body["tools"] = tools;
  return body;
}

TEST(ToolCalls, TheApiAnswersWithToolCalls) {
  ScriptedServer s("<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", kToolTemplate);
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
  for (const Json& chunk : sse_chunks(streamed->body)) {
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

// A form whose markers are special tokens in real vocabularies (plain text in
// the test's): the call is read, whole and streamed, and its text never shown.
TEST(ToolCalls, TheApiReadsMistralCalls) {
  ScriptedServer s("[TOOL_CALLS]weather[ARGS]{\"city\": \"Paris\"}", "{% for m in messages %}{{ m.content }}{% endfor %}{# [TOOL_CALLS] #}");
  const auto whole = s.post(request(false));
  ASSERT_TRUE(whole);
  const Json choice = Json::parse(whole->body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << whole->body;
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << whole->body;
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "weather");
  const auto streamed = s.post(request(true));
  ASSERT_TRUE(streamed);
  EXPECT_EQ(streamed->body.find("TOOL_CALLS"), std::string::npos) << streamed->body;
  EXPECT_NE(streamed->body.find("\"tool_calls\""), std::string::npos) << streamed->body;
}

// The next turn of a conversation with a call goes through the real template,
// which refuses ids that are not 9 letters and digits.
TEST(ToolCalls, AMistralCallsIdComesBackThroughItsTemplate) {
  ScriptedServer s("[TOOL_CALLS]weather[ARGS]{\"city\": \"Paris\"}", chat_data("Mistral-Small-3.2-24B-Instruct-2506.jinja"));
  const auto r = s.post(request(false));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json call = Json::parse(r->body)["choices"][0]["message"]["tool_calls"][0];
  Json next = request(false);
  next["messages"].push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", Json::array({call})}});
  next["messages"].push_back({{"role", "tool"}, {"tool_call_id", call["id"]}, {"content", "sunny"}});
  const auto prompt = s.post(next, "/apply-template");
  ASSERT_TRUE(prompt);
  EXPECT_EQ(prompt->status, 200) << prompt->body;
  EXPECT_NE(prompt->body.find(call["id"].get<std::string>()), std::string::npos) << prompt->body;
}

}  // namespace
}  // namespace shardlm::serve
