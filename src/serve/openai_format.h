// Response objects of the OpenAI API: completions and chat completions, whole
// and as server-sent-event chunks, usage, and error objects.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve/request_stream.h"
#include "serve/tool_calls.h"

namespace shardlm::serve {

enum class ApiKind { Chat, Completion };

struct ResponseHead {
  ApiKind kind;
  std::string id;  // "chatcmpl-…" / "cmpl-…"
  int64_t created = 0;
  std::string model;
};

nlohmann::ordered_json usage_json(const Usage& u);
// A choice's "logprobs" for these tokens. Chat: {"content": [{token, logprob,
// bytes, top_logprobs}]}; completions, the legacy form: {tokens,
// token_logprobs, top_logprobs: [{text: logprob}], text_offset}, where
// text_offset counts characters of the completion's text from `text_offset`,
// which is advanced past these tokens (LogprobEntry::text_chars).
nlohmann::ordered_json logprobs_json(ApiKind kind, const std::vector<LogprobEntry>& entries, int64_t& text_offset);
// A whole response: one choice with `text`, `finish` and `logprobs` (null when not asked).
nlohmann::ordered_json response_json(const ResponseHead& h, const std::string& text, FinishReason finish, const Usage& u,
                                     const nlohmann::ordered_json& logprobs = nullptr);
// One streamed chunk. Chat: role_only sends {"role":"assistant"} (the first chunk).
// finish == None: a text delta with the logprobs of its tokens (null when not
// asked); otherwise the closing chunk with its finish_reason.
nlohmann::ordered_json chunk_json(const ResponseHead& h, const std::string& text, FinishReason finish, bool role_only = false,
                                  const nlohmann::ordered_json& logprobs = nullptr);
// A streamed piece of a thinking model's reasoning: delta.reasoning_content.
nlohmann::ordered_json reasoning_chunk_json(const ResponseHead& h, const std::string& reasoning,
                                            const nlohmann::ordered_json& logprobs = nullptr);
// A chat reply that called tools: the message's content (null when only
// blanks), its tool_calls with ids "call_<response id>_<i>", finish_reason
// "tool_calls".
nlohmann::ordered_json tool_call_response_json(const ResponseHead& h, const SplitReply& reply, const Usage& u,
                                               const nlohmann::ordered_json& logprobs = nullptr);
// The streamed form: a delta with the calls (each with its index), then the
// closing chunk with finish_reason "tool_calls".
nlohmann::ordered_json tool_call_chunk_json(const ResponseHead& h, const std::vector<ToolCall>& calls);
nlohmann::ordered_json tool_call_finish_chunk_json(const ResponseHead& h);
// The chunk after the last one when stream_options.include_usage is set: no choices, usage.
nlohmann::ordered_json usage_chunk_json(const ResponseHead& h, const Usage& u);
nlohmann::ordered_json error_json(const std::string& message, int status, const std::string& param = {},
                                  const std::string& code = {});
std::string sse(const nlohmann::ordered_json& j);  // "data: {...}\n\n"

}  // namespace shardlm::serve
