#include "serve/openai_format.h"

#include <fmt/format.h>

namespace shardlm::serve {

using Json = nlohmann::ordered_json;

namespace {

Json head_json(const ResponseHead& h, bool chunk) {
  const char* object = h.kind == ApiKind::Chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return Json{{"id", h.id}, {"object", object}, {"created", h.created}, {"model", h.model}};
}

Json finish_json(FinishReason f) { return f == FinishReason::None ? Json(nullptr) : Json(finish_reason_name(f)); }

Json bytes_json(const std::string& s) {
  Json b = Json::array();
  for (const char c : s) b.push_back(int(static_cast<unsigned char>(c)));
  return b;
}

Json chat_choice_json(const TokenChoice& t) {
  return Json{{"token", t.token}, {"logprob", t.logprob}, {"bytes", bytes_json(t.token)}};
}

}  // namespace

Json usage_json(const Usage& u) {
  return Json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

Json logprobs_json(ApiKind kind, const std::vector<LogprobEntry>& entries, int64_t& text_offset) {
  if (kind == ApiKind::Chat) {
    Json content = Json::array();
    for (const LogprobEntry& e : entries) {
      Json j = chat_choice_json(e.chosen);
      j["top_logprobs"] = Json::array();
      for (const TokenChoice& t : e.top) j["top_logprobs"].push_back(chat_choice_json(t));
      content.push_back(std::move(j));
    }
    return Json{{"content", std::move(content)}};
  }
  Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(), offsets = Json::array();
  for (const LogprobEntry& e : entries) {
    tokens.push_back(e.chosen.token);
    token_logprobs.push_back(e.chosen.logprob);
    Json alternatives = Json::object();
    for (const TokenChoice& t : e.top)
      if (!alternatives.contains(t.token)) alternatives[t.token] = t.logprob;  // the likelier of two spellings
    top.push_back(std::move(alternatives));
    offsets.push_back(text_offset);
    text_offset += e.text_chars;  // characters of the returned text, as OpenAI counts
  }
  return Json{{"tokens", std::move(tokens)}, {"token_logprobs", std::move(token_logprobs)}, {"top_logprobs", std::move(top)},
              {"text_offset", std::move(offsets)}};
}

Json response_json(const ResponseHead& h, const std::string& text, FinishReason finish, const Usage& u, const Json& logprobs) {
  Json j = head_json(h, false);
  Json choice{{"index", 0}};
  if (h.kind == ApiKind::Chat) choice["message"] = {{"role", "assistant"}, {"content", text}};
  else choice["text"] = text;
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish_json(finish);
  j["choices"] = Json::array({choice});
  j["usage"] = usage_json(u);
  return j;
}

Json chunk_json(const ResponseHead& h, const std::string& text, FinishReason finish, bool role_only, const Json& logprobs) {
  Json j = head_json(h, true);
  Json choice{{"index", 0}};
  if (h.kind == ApiKind::Chat) {
    if (role_only) choice["delta"] = {{"role", "assistant"}, {"content", ""}};
    else if (finish != FinishReason::None) choice["delta"] = Json::object();
    else choice["delta"] = {{"content", text}};
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish_json(finish);
  j["choices"] = Json::array({choice});
  return j;
}

Json reasoning_chunk_json(const ResponseHead& h, const std::string& reasoning, const Json& logprobs) {
  Json j = chunk_json(h, "", FinishReason::None, false, logprobs);
  j["choices"][0]["delta"] = {{"reasoning_content", reasoning}};
  return j;
}

namespace {

Json tool_calls_json(const ResponseHead& h, const std::vector<ToolCall>& calls, bool with_index) {
  Json out = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    Json c;
    if (with_index) c["index"] = i;
    c["id"] = calls[i].id.empty() ? fmt::format("call_{}_{}", h.id, i) : calls[i].id;
    c["type"] = "function";
    c["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

Json tool_call_response_json(const ResponseHead& h, const SplitReply& reply, const Usage& u, const Json& logprobs) {
  Json j = response_json(h, reply.content, FinishReason::Stop, u, logprobs);
  Json& choice = j["choices"][0];
  if (without_blank_ends(reply.content).empty()) choice["message"]["content"] = nullptr;
  choice["message"]["tool_calls"] = tool_calls_json(h, reply.calls, false);
  choice["finish_reason"] = "tool_calls";
  return j;
}

Json tool_call_chunk_json(const ResponseHead& h, const std::vector<ToolCall>& calls) {
  Json j = chunk_json(h, "", FinishReason::None);
  j["choices"][0]["delta"] = {{"tool_calls", tool_calls_json(h, calls, true)}};
  return j;
}

Json tool_call_finish_chunk_json(const ResponseHead& h) {
  Json j = chunk_json(h, "", FinishReason::Stop);
  j["choices"][0]["finish_reason"] = "tool_calls";
  return j;
}

Json usage_chunk_json(const ResponseHead& h, const Usage& u) {
  Json j = head_json(h, true);
  j["choices"] = Json::array();
  j["usage"] = usage_json(u);
  return j;
}

Json error_json(const std::string& message, int status, const std::string& param, const std::string& code) {
  const char* type = status == 401   ? "authentication_error"
                     : status == 429 ? "rate_limit_error"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  return Json{{"error", {{"message", message}, {"type", type}, {"param", param.empty() ? Json(nullptr) : Json(param)},
                         {"code", code.empty() ? Json(nullptr) : Json(code)}}}};
}

std::string sse(const Json& j) {
  return "data: " + j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
}

}  // namespace shardlm::serve
