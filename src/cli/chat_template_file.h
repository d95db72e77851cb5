// The chat template `serve` and `run --chat` render conversations with.
#pragma once

#include <optional>
#include <string>

#include "chat/model_template.h"

namespace shardlm::gguf { class File; }

namespace shardlm::cli {

// The model's chat template, the one in `override_path` (--chat-template-file)
// instead when given, or none (ChatML) when the GGUF has none and no file is
// given; a template that does not parse is an error at start, not on every
// conversation.
std::optional<chat::ModelTemplate> load_chat_template(const gguf::File& file, const std::string& override_path);

}  // namespace shardlm::cli
