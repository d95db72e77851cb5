#include "serve/chat_prompt.h"

#include <fmt/format.h>

#include "chat/errors.h"
#include "chat/model_template.h"
#include "serve/request_error.h"

namespace shardlm::serve {

std::string message_text(const nlohmann::ordered_json& message, size_t index) {
  const std::string field = fmt::format("messages[{}].content", index);
  const auto it = message.find("content");
  if (it == message.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array()) throw RequestError(400, fmt::format("{} must be a string or an array of content parts", field), field);
  std::string text;
  for (const auto& part : *it) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
      throw RequestError(400, fmt::format(R"({}: only {{"type": "text", "text": string}} parts are supported)", field), field);
    text += part["text"].get<std::string>();
  }
  return text;
}

std::string render_chat_prompt(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                               const nlohmann::ordered_json& template_kwargs, const chat::ModelTemplate* tmpl,
                               const nlohmann::ordered_json& tools) {
  if (!messages.is_array()) throw RequestError(400, "messages must be an array", "messages");
  if (messages.empty()) throw RequestError(400, "messages must not be empty", "messages");
  // What templates are written for: content as one string (a list of text
  // parts became the list's Python text, or an error, in most of them), and
  // OpenAI's "developer" role as the "system" role it replaces.
  nlohmann::ordered_json plain_messages = nlohmann::ordered_json::array();
  std::string chatml;
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    const std::string field = fmt::format("messages[{}]", i);
    if (!m.is_object()) throw RequestError(400, fmt::format("{} must be an object", field), field);
    if (!m.contains("role") || !m["role"].is_string())
      throw RequestError(400, fmt::format("{}.role must be a string", field), field + ".role");
    auto& plain = plain_messages.emplace_back(m);
    if (plain["role"] == "developer") plain["role"] = "system";
    if (plain.contains("content") && plain["content"].is_array()) plain["content"] = message_text(m, i);
    chatml += fmt::format("<|im_start|>{}\n{}<|im_end|>\n", plain["role"].get<std::string>(), message_text(m, i));
  }
  if (!tmpl) {
    // ChatML has no way of its own to show tools; leaving them out silently
    // would let the client believe the model saw them.
    if (tools.is_array() && !tools.empty())
      throw RequestError(400, "'tools' needs the model's chat template, and this model has none (--chat-template-file)", "tools");
    return add_generation_prompt ? chatml + "<|im_start|>assistant\n" : chatml;
  }
  // Template kwargs first, so the request's own fields win on a clash.
  nlohmann::ordered_json context = template_kwargs.is_object() ? template_kwargs : nlohmann::ordered_json::object();
  context["messages"] = std::move(plain_messages);
  if (!tools.is_null()) context["tools"] = tools;
  context["add_generation_prompt"] = add_generation_prompt;
  try {
    return tmpl->apply(std::move(context));
  } catch (const chat::TemplateError& e) {
    throw RequestError(400, fmt::format("chat template: {}", e.what()), "messages");
  }
}

std::vector<TokenId> tokenize_chat_prompt(const Tokenizer& tok, const std::string& rendered,
                                          const nlohmann::ordered_json& messages) {
  // Each message's content, found in order in the rendered text, is plain
  // text; what lies between is the template's and may hold special tokens.
  std::vector<std::pair<size_t, size_t>> plain;
  size_t at = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string content = message_text(messages[i], i);
    if (content.empty()) continue;
    const size_t found = rendered.find(content, at);
    if (found == std::string::npos) continue;  // the template changed it; it stays within the template's text
    plain.emplace_back(found, found + content.size());
    at = found + content.size();
  }
  std::vector<TokenId> out = tok.encode_with_plain(rendered, plain);
  if (tok.adds_bos() && tok.bos() >= 0 && (out.empty() || out.front() != tok.bos())) out.insert(out.begin(), tok.bos());
  return out;
}

}  // namespace shardlm::serve
