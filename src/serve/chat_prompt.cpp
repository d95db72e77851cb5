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
  std::string chatml;
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    const std::string field = fmt::format("messages[{}]", i);
    if (!m.is_object()) throw RequestError(400, fmt::format("{} must be an object", field), field);
    if (!m.contains("role") || !m["role"].is_string())
      throw RequestError(400, fmt::format("{}.role must be a string", field), field + ".role");
    chatml += fmt::format("<|im_start|>{}\n{}<|im_end|>\n", m["role"].get<std::string>(), message_text(m, i));
  }
  if (!tmpl) return add_generation_prompt ? chatml + "<|im_start|>assistant\n" : chatml;
  // Template kwargs first, so the request's own fields win on a clash.
  nlohmann::ordered_json context = template_kwargs.is_object() ? template_kwargs : nlohmann::ordered_json::object();
  context["messages"] = messages;
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
  std::vector<TokenId> out;
  const auto append = [&](std::string_view text, bool parse_special) {
    const auto ids = tok.encode(text, false, parse_special);
    out.insert(out.end(), ids.begin(), ids.end());
  };
  // Each message's content, found in order in the rendered text, is tokenized
  // as plain text; what lies between is the template's and may hold special tokens.
  size_t at = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string content = message_text(messages[i], i);
    if (content.empty()) continue;
    const size_t found = rendered.find(content, at);
    if (found == std::string::npos) continue;  // the template changed it; it stays within the template's text
    append(std::string_view(rendered).substr(at, found - at), true);
    append(content, false);
    at = found + content.size();
  }
  append(std::string_view(rendered).substr(at), true);
  if (tok.adds_bos() && tok.bos() >= 0 && (out.empty() || out.front() != tok.bos())) out.insert(out.begin(), tok.bos());
  return out;
}

}  // namespace shardlm::serve
