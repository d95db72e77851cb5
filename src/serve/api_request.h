// The fields of OpenAI /v1/chat/completions and /v1/completions bodies that
// shardlm uses, checked: a wrong type is a RequestError naming the field,
// unknown fields are ignored as OpenAI does.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/sampler.h"
#include "tokenizer/tokenizer.h"

namespace shardlm::serve {

// OpenAI's limit for a request's `n`; each choice takes a KV slot (or waits in the queue).
constexpr int kMaxChoices = 128;

struct ApiRequest {
  std::optional<std::string> model;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  SamplerParams sampling;
  int64_t max_tokens = -1;     // -1: until the context is full
  int n = 1;                   // choices: sequences of the one prompt, seeds seed, seed + 1, ...
  std::vector<std::string> stop;
  // Chat.
  nlohmann::ordered_json messages;
  bool add_generation_prompt = true;
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();
  nlohmann::ordered_json tools;  // null, or the request's array of tool definitions
  bool tool_choice_none = false;  // "tool_choice": "none": the reply is never read for tool calls
  // "reasoning_format": "none" keeps a thinking model's reasoning in the
  // content (false), "auto" or "deepseek" sends it apart (true); unset: the server's choice.
  std::optional<bool> separate_reasoning;
  // Completions: text, or token ids when prompt_ids is set.
  std::string prompt_text;
  std::optional<std::vector<TokenId>> prompt_ids;
};

// Throws RequestError (400) for a body that is not an object, a field of the
// wrong type or out of range, n != 1, or top_logprobs without logprobs.
// Log-probabilities asked set sampling.logprobs (chat: logprobs + top_logprobs;
// completions: logprobs N).
ApiRequest parse_chat_request(const nlohmann::ordered_json& body);
ApiRequest parse_completion_request(const nlohmann::ordered_json& body);

// llama-server's /tokenize: {"content", "add_special" (false), "parse_special" (true), "with_pieces" (false)}.
struct TokenizeRequest {
  std::string content;
  bool add_special = false;
  bool parse_special = true;
  bool with_pieces = false;
};
TokenizeRequest parse_tokenize_request(const nlohmann::ordered_json& body);
// /detokenize: {"tokens": [ids]} (ids checked against the vocabulary by the caller).
std::vector<TokenId> parse_detokenize_request(const nlohmann::ordered_json& body);

}  // namespace shardlm::serve
