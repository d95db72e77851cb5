#include "serve/openai_format.h"

namespace shardlm::serve {

using Json = nlohmann::ordered_json;

namespace {

Json head_json(const ResponseHead& h, bool chunk) {
  const char* object = h.kind == ApiKind::Chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return Json{{"id", h.id}, {"object", object}, {"created", h.created}, {"model", h.model}};
}

Json finish_json(FinishReason f) { return f == FinishReason::None ? Json(nullptr) : Json(finish_reason_name(f)); }

}  // namespace

Json usage_json(const Usage& u) {
  return Json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

Json response_json(const ResponseHead& h, const std::string& text, FinishReason finish, const Usage& u) {
  Json j = head_json(h, false);
  Json choice{{"index", 0}};
  if (h.kind == ApiKind::Chat) choice["message"] = {{"role", "assistant"}, {"content", text}};
  else choice["text"] = text;
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_json(finish);
  j["choices"] = Json::array({choice});
  j["usage"] = usage_json(u);
  return j;
}

Json chunk_json(const ResponseHead& h, const std::string& text, FinishReason finish, bool role_only) {
  Json j = head_json(h, true);
  Json choice{{"index", 0}};
  if (h.kind == ApiKind::Chat) {
    if (role_only) choice["delta"] = {{"role", "assistant"}, {"content", ""}};
    else if (finish != FinishReason::None) choice["delta"] = Json::object();
    else choice["delta"] = {{"content", text}};
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_json(finish);
  j["choices"] = Json::array({choice});
  return j;
}

Json usage_chunk_json(const ResponseHead& h, const Usage& u) {
  Json j = head_json(h, true);
  j["choices"] = Json::array();
  j["usage"] = usage_json(u);
  return j;
}

Json error_json(const std::string& message, int status, const std::string& param) {
  const char* type = status == 401   ? "authentication_error"
                     : status == 429 ? "rate_limit_error"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  return Json{{"error", {{"message", message}, {"type", type}, {"param", param.empty() ? Json(nullptr) : Json(param)},
                         {"code", nullptr}}}};
}

std::string sse(const Json& j) {
  return "data: " + j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
}

}  // namespace shardlm::serve
