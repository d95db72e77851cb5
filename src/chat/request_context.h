// The template context of an OpenAI-style chat request, as llama-server and
// vLLM build it: messages, tools, add_generation_prompt (default true), and
// the keys of chat_template_kwargs (enable_thinking, ...) as variables.
#pragma once

#include <nlohmann/json.hpp>

namespace shardlm::chat {

// Throws shardlm::Error naming the field when `body` has a wrong type
// (messages not a list of objects, tools not a list, kwargs not an object).
nlohmann::ordered_json context_from_request(const nlohmann::ordered_json& body);

}  // namespace shardlm::chat
