#include "cli/chat_template_file.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <iterator>

#include "chat/errors.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/vocab.h"

namespace shardlm::cli {

std::optional<chat::ModelTemplate> load_chat_template(const gguf::File& file, const std::string& override_path) {
  std::optional<std::string> source;
  if (!override_path.empty()) {
    std::ifstream in(override_path, std::ios::binary);
    if (!in) throw Error(fmt::format("--chat-template-file {}: cannot open", override_path));
    source = std::string(std::istreambuf_iterator<char>(in), {});
  } else if (!file.find("tokenizer.chat_template")) {
    spdlog::warn("the model has no tokenizer.chat_template; chats are rendered as ChatML");
    return std::nullopt;
  }
  const tok::Vocabulary vocab = tok::Vocabulary::load(file);
  try {
    return chat::ModelTemplate(file, vocab, source);
  } catch (const chat::ParseError& e) {
    throw Error(fmt::format("chat template{}: {}", override_path.empty() ? "" : " " + override_path, e.what()));
  }
}

}  // namespace shardlm::cli
