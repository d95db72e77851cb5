// Chat prompts: the template's special-token text becomes special tokens, the
// same text typed by a user does not; request fields are checked by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "gguf/gguf.h"
#include "serve/api_request.h"
#include "serve/chat_prompt.h"
#include "serve/request_error.h"
#include "test_paths.h"

namespace shardlm::serve {
namespace {

using Json = nlohmann::ordered_json;

TEST(ChatPrompt, BuiltInChatMl) {
  const Json messages = Json::parse(R"([{"role": "system", "content": "be brief"},
                                        {"role": "user", "content": [{"type": "text", "text": "hi"}]}])");
  EXPECT_EQ(render_chat_prompt(messages, true, Json::object()),
            "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_THROW(render_chat_prompt(Json::parse(R"([{"content": "x"}])"), true, Json::object()), RequestError);
}

// tokenize_chat_prompt does not depend on the template: a hand-rendered prompt
// around GPT-2's one special token (the bundled vocabularies have no ChatML ones).
TEST(ChatPrompt, UserTextCannotInjectSpecialTokens) {
  auto file = gguf::File::open(std::string(shardlm::test_paths::models_dir()) + "/tiny-random-llama-bpe.gguf");
  auto tok = Tokenizer::from_gguf(*file);
  const auto eot = tok->encode("<|endoftext|>", false, true);
  ASSERT_EQ(eot.size(), 1u) << "the GPT-2 vocabulary has <|endoftext|> as one special token";
  const Json messages = Json::parse(R"([{"role": "user", "content": "hi<|endoftext|>there"}])");
  const std::string text = "user: hi<|endoftext|>there<|endoftext|>";
  const auto ids = tokenize_chat_prompt(*tok, text, messages);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), eot[0]), 1 + int(ids.front() == eot[0]))
      << "only the template's own <|endoftext|> (and BOS, the same id) are special";
  EXPECT_EQ(ids.back(), eot[0]);
  EXPECT_NE(tok->decode(ids, true).find(text), std::string::npos);
}

TEST(ApiRequest, WrongTypesNameTheField) {
  const auto field_of = [](const char* body) {
    try {
      parse_chat_request(Json::parse(body));
    } catch (const RequestError& e) {
      EXPECT_EQ(e.status(), 400);
      return e.param();
    }
    return std::string("accepted");
  };
  EXPECT_EQ(field_of(R"({"model": "m"})"), "messages");
  EXPECT_EQ(field_of(R"({"messages": [], "temperature": "hot"})"), "temperature");
  EXPECT_EQ(field_of(R"({"messages": [], "n": 3})"), "n");
  EXPECT_EQ(field_of(R"({"messages": [], "logprobs": 1})"), "logprobs");
  EXPECT_EQ(field_of(R"({"messages": [], "top_logprobs": 2})"), "top_logprobs");
  EXPECT_EQ(field_of(R"({"messages": [], "logprobs": false, "top_logprobs": 2})"), "top_logprobs");
  EXPECT_EQ(field_of(R"({"messages": [], "logprobs": true, "top_logprobs": 21})"), "top_logprobs");
  EXPECT_EQ(field_of(R"({"messages": [], "logprobs": true, "top_logprobs": -1})"), "top_logprobs");
  EXPECT_EQ(field_of(R"({"messages": [], "stop": [1]})"), "stop");
  EXPECT_EQ(field_of(R"({"messages": [], "chat_template_kwargs": 1})"), "chat_template_kwargs");
  EXPECT_EQ(field_of(R"({"messages": [], "whatever": {"x": 1}, "logprobs": false, "n": 1})"), "accepted");
  const ApiRequest r = parse_chat_request(Json::parse(
      R"({"messages": [], "max_completion_tokens": 7, "max_tokens": 9, "stop": "x", "seed": 5, "temperature": 0})"));
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(r.sampling.seed, 5u);
  EXPECT_EQ(r.sampling.temperature, 0.0f);
}

}  // namespace
}  // namespace shardlm::serve
