#include "chat/model_template.h"

#include <fmt/format.h>

#include "gguf/gguf.h"
#include "tokenizer/vocab.h"

namespace shardlm::chat {

namespace {

std::string template_source(const gguf::File& file, std::optional<std::string> source_override) {
  if (source_override) return std::move(*source_override);
  std::optional<std::string> source = file.get_string("tokenizer.chat_template");
  if (!source)
    throw shardlm::Error(
        fmt::format("{}: no tokenizer.chat_template in the metadata (give a template file instead)", file.path()));
  return std::move(*source);
}

std::string token_text(const tok::Vocabulary& vocab, TokenId id) {
  if (id < 0 || static_cast<size_t>(id) >= vocab.tokens.size()) return {};
  return vocab.tokens[static_cast<size_t>(id)].text;
}

}  // namespace

ModelTemplate::ModelTemplate(const gguf::File& file, const tok::Vocabulary& vocab,
                             std::optional<std::string> source_override)
    : source_(template_source(file, std::move(source_override))),
      template_(source_),
      bos_token_(token_text(vocab, vocab.bos)),
      eos_token_(token_text(vocab, vocab.eos)) {}

std::string ModelTemplate::apply(nlohmann::ordered_json context, const RenderOptions& options) const {
  if (!context.is_object()) throw RenderError("chat template context must be a JSON object");
  if (!context.contains("bos_token")) context["bos_token"] = bos_token_;
  if (!context.contains("eos_token")) context["eos_token"] = eos_token_;
  return template_.render(context, options);
}

}  // namespace shardlm::chat
