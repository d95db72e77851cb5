// A model's chat template: the GGUF's tokenizer.chat_template (or a file
// given instead) with the bos_token / eos_token strings of its vocabulary,
// which Hugging Face passes to every template render.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/template.h"

namespace shardlm::gguf { class File; }
namespace shardlm::tok { struct Vocabulary; }

namespace shardlm::chat {

class ModelTemplate {
 public:
  // `source_override` (e.g. --chat-template-file) replaces the GGUF's text.
  // Throws shardlm::Error naming the file when it carries no template, and
  // ParseError when the text is not a template we can run.
  ModelTemplate(const gguf::File& file, const tok::Vocabulary& vocab,
                std::optional<std::string> source_override = std::nullopt);

  // Renders `context` (messages, tools, add_generation_prompt, extra kwargs);
  // bos_token and eos_token are added unless the context sets them.
  std::string apply(nlohmann::ordered_json context, const RenderOptions& options = {}) const;

  const std::string& source() const { return source_; }  // the template's text
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

 private:
  std::string source_;
  Template template_;
  std::string bos_token_, eos_token_;
};

}  // namespace shardlm::chat
