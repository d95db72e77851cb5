// Chat prompts: the template's special-token text becomes special tokens, the
// same text typed by a user does not; request fields are checked by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "chat/model_template.h"
#include "gguf/gguf.h"
#include "serve/api_request.h"
#include "serve/chat_prompt.h"
#include "serve/request_error.h"
#include "test_paths.h"
#include "tokenizer/vocab.h"

namespace shardlm::serve {
namespace {

using Json = nlohmann::ordered_json;

TEST(ChatPrompt, BuiltInChatMl) {
  const Json messages = Json::parse(R"([{"role": "system", "content": "be brief"},
                                        {"role": "user", "content": [{"type": "text", "text": "hi"}]}])");
  EXPECT_EQ(render_chat_prompt(messages, true, Json::object()),
            "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_THROW(render_chat_prompt(Json::parse(R"([{"content": "x"}])"), true, Json::object()), RequestError);
  // ChatML cannot show tools: a request with some is refused rather than rendered without them.
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {}}}])");
  EXPECT_THROW(render_chat_prompt(messages, true, Json::object(), nullptr, tools), RequestError);
  EXPECT_NO_THROW(render_chat_prompt(messages, true, Json::object(), nullptr, Json::array()));
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

// The whole rendered prompt is tokenized at once, so pieces merge across the
// edges of a message's content as they do when the same text is a
// completion's prompt (other engines count a chat prompt's tokens so).
TEST(ChatPrompt, TokensAreThoseOfTheWholeRenderedText) {
  const Json messages = Json::parse(R"([{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": "Once upon a time"}])");
  const std::string text = render_chat_prompt(messages, true, Json::object());
  for (const char* name : {"/stories260K.gguf", "/tiny-random-llama-bpe.gguf", "/vocab/ggml-vocab-llama-spm.gguf"}) {
    auto file = gguf::File::open(std::string(shardlm::test_paths::models_dir()) + name);
    auto tok = Tokenizer::from_gguf(*file);
    auto whole = tok->encode(text, false, true);
    if (tok->adds_bos()) whole.insert(whole.begin(), tok->bos());
    EXPECT_EQ(tokenize_chat_prompt(*tok, text, messages), whole) << name;
  }
}

// Templates get content as one string and OpenAI's "developer" role as "system".
TEST(ChatPrompt, TemplatesGetPlainMessages) {
  auto file = gguf::File::open(std::string(shardlm::test_paths::models_dir()) + "/vocab/ggml-vocab-llama-spm.gguf");
  const tok::Vocabulary vocab = tok::Vocabulary::load(*file);
  // Qwen's way: string concatenation, which a list of parts fails.
  const chat::ModelTemplate tmpl(*file, vocab, std::string(
      "{% for m in messages %}{{ '<' + m.role + '>' + m.content + '\\n' }}{% endfor %}"));
  const Json messages = Json::parse(R"([{"role": "developer", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Once "}, {"type": "text", "text": "upon"}]}])");
  EXPECT_EQ(render_chat_prompt(messages, true, Json::object(), &tmpl), "<system>Be brief.\n<user>Once upon\n");
  EXPECT_EQ(render_chat_prompt(messages, true, Json::object()),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nOnce upon<|im_end|>\n<|im_start|>assistant\n");
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
  EXPECT_EQ(field_of(R"({"messages": [], "n": 0})"), "n");
  EXPECT_EQ(field_of(R"({"messages": [], "n": 129})"), "n");
  EXPECT_EQ(field_of(R"({"messages": [], "n": 3})"), "accepted");
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
