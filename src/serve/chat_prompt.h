// A chat request's messages → prompt text → tokens. Rendering is the one
// place a chat template applies: the model's (chat::ModelTemplate, from the
// GGUF's tokenizer.chat_template or --chat-template-file), or a built-in
// ChatML prompt for a model that carries none.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace shardlm::chat { class ModelTemplate; }

namespace shardlm::serve {

// Checks `messages` (a non-empty array of {role, content}) and renders them
// with `tmpl` (ChatML when null), passing `tools` and the template kwargs;
// throws RequestError naming the field that is wrong, or with the template's
// own message when the template refuses the conversation.
std::string render_chat_prompt(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                               const nlohmann::ordered_json& template_kwargs,
                               const chat::ModelTemplate* tmpl = nullptr,
                               const nlohmann::ordered_json& tools = nullptr);

// The text of a message's content: a string, an array of {"type":"text","text":...} parts, or null.
std::string message_text(const nlohmann::ordered_json& message, size_t index);

// Tokens of a rendered prompt: the template's own special-token text becomes
// special tokens, the same text inside a message's content does not. BOS is
// added when the vocabulary asks for it and the template did not write it.
std::vector<TokenId> tokenize_chat_prompt(const Tokenizer& tok, const std::string& rendered,
                                          const nlohmann::ordered_json& messages);

}  // namespace shardlm::serve
