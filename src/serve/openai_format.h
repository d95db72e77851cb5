// Response objects of the OpenAI API: completions and chat completions, whole
// and as server-sent-event chunks, usage, and error objects.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "serve/request_stream.h"

namespace shardlm::serve {

enum class ApiKind { Chat, Completion };

struct ResponseHead {
  ApiKind kind;
  std::string id;  // "chatcmpl-…" / "cmpl-…"
  int64_t created = 0;
  std::string model;
};

nlohmann::ordered_json usage_json(const Usage& u);
// A whole response: one choice with `text` and `finish`.
nlohmann::ordered_json response_json(const ResponseHead& h, const std::string& text, FinishReason finish, const Usage& u);
// One streamed chunk. Chat: role_only sends {"role":"assistant"} (the first chunk).
// finish == None: a text delta; otherwise the closing chunk with its finish_reason.
nlohmann::ordered_json chunk_json(const ResponseHead& h, const std::string& text, FinishReason finish, bool role_only = false);
// The chunk after the last one when stream_options.include_usage is set: no choices, usage.
nlohmann::ordered_json usage_chunk_json(const ResponseHead& h, const Usage& u);
nlohmann::ordered_json error_json(const std::string& message, int status, const std::string& param = {});
std::string sse(const nlohmann::ordered_json& j);  // "data: {...}\n\n"

}  // namespace shardlm::serve
