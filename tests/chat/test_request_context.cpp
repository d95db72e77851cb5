// context_from_request: an OpenAI chat body → the template's variables.
#include <gtest/gtest.h>

#include "chat/request_context.h"
#include "core/error.h"

namespace shardlm::chat {
namespace {

using json = nlohmann::ordered_json;

TEST(ChatRequestContext, CopiesMessagesToolsAndKwargs) {
  json body = json::parse(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
      "tools": [{"type": "function", "function": {"name": "f"}}],
      "chat_template_kwargs": {"enable_thinking": false, "messages": "ignored"}})");
  json context = context_from_request(body);
  EXPECT_EQ(context["messages"], body["messages"]);
  EXPECT_EQ(context["tools"], body["tools"]);
  EXPECT_EQ(context["enable_thinking"], false);
  EXPECT_EQ(context["add_generation_prompt"], true);
  EXPECT_FALSE(context.contains("model"));
  // Key order survives (json.dumps of tools must keep it).
  EXPECT_EQ(context["tools"][0].begin().key(), "type");
}

TEST(ChatRequestContext, WrongTypesNameTheField) {
  auto message_of = [](const char* text) {
    try {
      context_from_request(json::parse(text));
    } catch (const shardlm::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message_of(R"({})").find("'messages' is missing"), std::string::npos);
  EXPECT_NE(message_of(R"({"messages": "hi"})").find("'messages' must be a list"), std::string::npos);
  EXPECT_NE(message_of(R"({"messages": [1]})").find("messages[0]"), std::string::npos);
  EXPECT_NE(message_of(R"({"messages": [], "tools": {}})").find("'tools'"), std::string::npos);
  EXPECT_NE(message_of(R"({"messages": [], "add_generation_prompt": 1})").find("add_generation_prompt"), std::string::npos);
  EXPECT_NE(message_of(R"({"messages": [], "chat_template_kwargs": []})").find("chat_template_kwargs"), std::string::npos);
}

}  // namespace
}  // namespace shardlm::chat
