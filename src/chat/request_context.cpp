#include "chat/request_context.h"

#include <fmt/format.h>

#include "core/error.h"

namespace shardlm::chat {

nlohmann::ordered_json context_from_request(const nlohmann::ordered_json& body) {
  if (!body.is_object()) throw shardlm::Error("chat request: the body must be a JSON object");
  auto messages = body.find("messages");
  if (messages == body.end()) throw shardlm::Error("chat request: 'messages' is missing");
  if (!messages->is_array()) throw shardlm::Error("chat request: 'messages' must be a list");
  for (size_t i = 0; i < messages->size(); ++i)
    if (!(*messages)[i].is_object() || !(*messages)[i].contains("role"))
      throw shardlm::Error(fmt::format("chat request: messages[{}] must be an object with a 'role'", i));
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  // Template kwargs first, so the request's own fields win on a clash.
  if (auto kwargs = body.find("chat_template_kwargs"); kwargs != body.end() && !kwargs->is_null()) {
    if (!kwargs->is_object()) throw shardlm::Error("chat request: 'chat_template_kwargs' must be an object");
    for (const auto& [key, value] : kwargs->items()) context[key] = value;
  }
  context["messages"] = *messages;
  if (auto tools = body.find("tools"); tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) throw shardlm::Error("chat request: 'tools' must be a list");
    context["tools"] = *tools;
  }
  bool add_generation_prompt = true;
  if (auto agp = body.find("add_generation_prompt"); agp != body.end()) {
    if (!agp->is_boolean()) throw shardlm::Error("chat request: 'add_generation_prompt' must be a boolean");
    add_generation_prompt = agp->get<bool>();
  }
  context["add_generation_prompt"] = add_generation_prompt;
  return context;
}

}  // namespace shardlm::chat
