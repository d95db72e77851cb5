// A thinking model's reasoning apart from its answer: which templates think,
// where a reply starts, the split whole and in pieces, and the API's answers
// (message.reasoning_content, delta.reasoning_content) over a scripted engine.
#include <gtest/gtest.h>

#include "scripted_server.h"
#include "serve/reasoning.h"
#include "test_paths.h"

namespace shardlm::serve {
namespace {

using Json = nlohmann::ordered_json;

using test_paths::chat_data;

TEST(Reasoning, TheTemplatesThatThink) {
  for (const char* thinks : {"Qwen-Qwen3-0.6B.jinja", "Qwen-QwQ-32B.jinja", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
                             "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "deepseek-ai-DeepSeek-V3.1.jinja",
                             "HuggingFaceTB-SmolLM3-3B.jinja"})
    EXPECT_TRUE(template_thinks(chat_data(thinks))) << thinks;
  for (const char* plain : {"Qwen-Qwen2.5-7B-Instruct.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja",
                            "mistralai-Mistral-Nemo-Instruct-2407.jinja", "google-gemma-2-2b-it.jinja"})
    EXPECT_FALSE(template_thinks(chat_data(plain))) << plain;
}

// The generation prompts of the real templates (golden.json, rendered by jinja2).
TEST(Reasoning, ARenderedPromptMayOpenTheThinking) {
  const Json golden = Json::parse(chat_data("golden.json"));
  int seen = 0;
  for (const Json& c : golden["cases"]) {
    if (c["conversation"] != "single-user" || !c.contains("rendered")) continue;
    const std::string name = c["template"], rendered = c["rendered"];
    // The R1 Llama distill opens <think> in the generation prompt; Qwen3 lets
    // the model open it; these QwQ, R1 Qwen distill and V3.1 close it unless
    // asked to think (enable_thinking, thinking).
    const bool opens = name == "deepseek-ai-DeepSeek-R1-Distill-Llama-8B";
    EXPECT_EQ(prompt_opens_thinking(rendered), opens) << name;
    ++seen;
  }
  EXPECT_GE(seen, 15);
  EXPECT_TRUE(prompt_opens_thinking("<｜Assistant｜><think>"));
  EXPECT_TRUE(prompt_opens_thinking("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
}

TEST(Reasoning, SplitsAWholeReply) {
  auto check = [](std::string_view reply, bool starts, const char* reasoning, const char* content) {
    const ReasonedReply r = split_reasoning(reply, starts);
    EXPECT_EQ(r.reasoning, reasoning) << reply;
    EXPECT_EQ(r.content, content) << reply;
  };
  check("<think>\nThe user greets me.\n</think>\n\nHello!", false, "The user greets me.", "Hello!");
  check("  <think>a  b</think>c  ", false, "a  b", "c  ");
  check("The user greets me.\n</think>\n\nHello!", true, "The user greets me.", "Hello!");
  check("<think>\n\n</think>\n\nHello!", false, "", "Hello!");
  check("<think>cut short", false, "cut short", "");
  check("cut short  ", true, "cut short", "");
  // No think block at the start: content as it came.
  check(" Hello <think>x</think>", false, "", " Hello <think>x</think>");
  check("<thinking>x", false, "", "<thinking>x");
  check("", false, "", "");
  check("", true, "", "");
}

// Every way of cutting a reply into two or three pieces gives the whole split.
TEST(Reasoning, SplitsAReplyInPiecesAsAWhole) {
  const std::vector<std::pair<std::string, bool>> replies = {
      {"<think>\nThe user greets me.\n</think>\n\nHello!", false},
      {" \n<think> a </thin b </think>  c d ", false},
      {"reasoning \n </think> \n answer", true},
      {"<thi", false},
      {"<think>no end  ", false},
      {"  plain <think> text", false},
      {"</think></think>x", true},
  };
  for (const auto& [reply, starts] : replies) {
    const ReasonedReply whole = split_reasoning(reply, starts);
    for (size_t i = 0; i <= reply.size(); ++i)
      for (size_t j = i; j <= reply.size(); ++j) {
        ReasoningSplitter s(starts);
        ReasonedReply got;
        for (const auto& piece : {reply.substr(0, i), reply.substr(i, j - i), reply.substr(j)}) {
          const ReasonedReply r = s.push(piece);
          got.reasoning += r.reasoning;
          got.content += r.content;
        }
        const ReasonedReply rest = s.finish();
        EXPECT_EQ(got.reasoning + rest.reasoning, whole.reasoning) << reply << " cut at " << i << ", " << j;
        EXPECT_EQ(got.content + rest.content, whole.content) << reply << " cut at " << i << ", " << j;
      }
  }
}

TEST(Reasoning, NothingOfATagGoesOutBeforeItIsKnown) {
  ReasoningSplitter s(false);
  EXPECT_EQ(s.push(" <thi").content, "");
  EXPECT_EQ(s.push("nk>Let me see").reasoning, "Let me see");
  EXPECT_EQ(s.push(" </th").reasoning, "");
  const ReasonedReply r = s.push("ink>\nYes.");
  EXPECT_EQ(r.reasoning, "");
  EXPECT_EQ(r.content, "Yes.");
}

const Json kQuestion = Json::parse(R"({"messages": [{"role": "user", "content": "Hello?"}]})");
// A template that thinks and leaves opening the block to the model, and one whose prompt opens it.
const std::string kThinks = "{% for m in messages %}{{ m.content }}{% endfor %}{# <think></think> #}";
const std::string kOpensThinking = "{% for m in messages %}{{ m.content }}{% endfor %}<think>\n{# </think> #}";

Json ask(bool stream, const char* reasoning_format = nullptr) {
  Json body = kQuestion;
  body["stream"] = stream;
  if (reasoning_format) body["reasoning_format"] = reasoning_format;
  return body;
}

// The streamed reply's reasoning and content, each its deltas joined.
std::pair<std::string, std::string> streamed_parts(const std::string& body) {
  std::string reasoning, content;
  for (const Json& chunk : sse_chunks(body)) {
    const Json& delta = chunk["choices"][0]["delta"];
    if (delta.contains("reasoning_content")) reasoning += delta["reasoning_content"].get<std::string>();
    if (delta.contains("content")) content += delta["content"].get<std::string>();
  }
  return {reasoning, content};
}

TEST(Reasoning, TheApiSendsTheReasoningApart) {
  for (const bool opened_by_prompt : {false, true}) {
    ScriptedServer s(opened_by_prompt ? "Greet back.\n</think>\n\nHello there." : "<think>\nGreet back.\n</think>\n\nHello there.",
                     opened_by_prompt ? kOpensThinking : kThinks);
    const auto whole = s.post(ask(false));
    ASSERT_TRUE(whole);
    ASSERT_EQ(whole->status, 200) << whole->body;
    const Json message = Json::parse(whole->body)["choices"][0]["message"];
    EXPECT_EQ(message["reasoning_content"], "Greet back.") << whole->body;
    EXPECT_EQ(message["content"], "Hello there.") << whole->body;

    const auto streamed = s.post(ask(true));
    ASSERT_TRUE(streamed);
    EXPECT_EQ(streamed->body.find("think>"), std::string::npos) << streamed->body;
    const auto [reasoning, content] = streamed_parts(streamed->body);
    EXPECT_EQ(reasoning, "Greet back.") << streamed->body;
    EXPECT_EQ(content, "Hello there.") << streamed->body;

    // reasoning_format "none": the reply as the model wrote it.
    const auto inline_reply = s.post(ask(false, "none"));
    ASSERT_TRUE(inline_reply);
    const Json m = Json::parse(inline_reply->body)["choices"][0]["message"];
    EXPECT_FALSE(m.contains("reasoning_content")) << inline_reply->body;
    EXPECT_NE(m["content"].get<std::string>().find("</think>"), std::string::npos) << inline_reply->body;
  }
}

TEST(Reasoning, TheServerFlagAndTheRequestField) {
  ScriptedServer s("<think>x</think>y", kThinks, /*separate_reasoning=*/false);
  const auto kept = s.post(ask(false));
  ASSERT_TRUE(kept);
  EXPECT_NE(Json::parse(kept->body)["choices"][0]["message"]["content"].get<std::string>().find("<think>"), std::string::npos);
  const auto apart = s.post(ask(false, "deepseek"));
  ASSERT_TRUE(apart);
  EXPECT_EQ(Json::parse(apart->body)["choices"][0]["message"]["reasoning_content"], "x") << apart->body;
  const auto wrong = s.post(ask(false, "hidden"));
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 400);
  EXPECT_NE(wrong->body.find("reasoning_format"), std::string::npos) << wrong->body;
}

// QwQ's template closes the block unless enable_thinking is set: the server
// sets it, so the model thinks and its reasoning goes apart, unless the request
// turns thinking off.
TEST(Reasoning, AThinkingModelThinksUnlessAskedNotTo) {
  ScriptedServer s("plan\n</think>\n\nanswer", chat_data("Qwen-QwQ-32B.jinja"));
  const auto prompt = s.post(kQuestion, "/apply-template");
  ASSERT_TRUE(prompt);
  EXPECT_TRUE(Json::parse(prompt->body)["prompt"].get<std::string>().ends_with("<think>\n")) << prompt->body;
  const auto r = s.post(ask(false));
  ASSERT_TRUE(r);
  const Json m = Json::parse(r->body)["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "plan") << r->body;
  EXPECT_EQ(m["content"], "answer") << r->body;

  Json off = kQuestion;
  off["chat_template_kwargs"] = {{"enable_thinking", false}};
  const auto closed = s.post(off, "/apply-template");
  ASSERT_TRUE(closed);
  EXPECT_TRUE(Json::parse(closed->body)["prompt"].get<std::string>().ends_with("</think>")) << closed->body;
}

// A template that does not think: a <think> in the reply is content.
TEST(Reasoning, ATemplateWithoutThinkingKeepsTheText) {
  ScriptedServer s("<think>x</think>y", "{% for m in messages %}{{ m.content }}{% endfor %}");
  const auto r = s.post(ask(false));
  ASSERT_TRUE(r);
  const Json m = Json::parse(r->body)["choices"][0]["message"];
  EXPECT_FALSE(m.contains("reasoning_content"));
  EXPECT_NE(m["content"].get<std::string>().find("<think>x</think>"), std::string::npos) << r->body;
}

// Qwen3 thinks, then calls a tool: the reasoning goes apart, the call is read from the answer.
TEST(Reasoning, ToolCallsAfterTheReasoning) {
  ScriptedServer s("<think>I need the weather.</think>\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
                   "{% for m in messages %}{{ m.content }}{% endfor %}{# <think></think> <tool_call></tool_call> #}");
  Json body = ask(false);
  body["tools"] = Json::parse(R"([{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}])");
  const auto whole = s.post(body);
  ASSERT_TRUE(whole);
  const Json choice = Json::parse(whole->body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << whole->body;
  EXPECT_EQ(choice["message"]["reasoning_content"], "I need the weather.") << whole->body;
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << whole->body;
  EXPECT_TRUE(choice["message"]["content"].is_null()) << whole->body;

  body["stream"] = true;
  const auto streamed = s.post(body);
  ASSERT_TRUE(streamed);
  const auto [reasoning, content] = streamed_parts(streamed->body);
  EXPECT_EQ(reasoning, "I need the weather.") << streamed->body;
  EXPECT_EQ(without_blank_ends(content), "") << streamed->body;
  EXPECT_NE(streamed->body.find("\"tool_calls\""), std::string::npos) << streamed->body;
}

}  // namespace
}  // namespace shardlm::serve
