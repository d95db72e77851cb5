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

}  // namespace
}  // namespace shardlm::serve
