#include "serve/tool_calls.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace shardlm::serve {
namespace {

constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";

// {"name": string, <arguments_key>: object or its text}; false for anything else.
bool parse_call(std::string_view text, ToolCall& call) {
  const auto j = nlohmann::json::parse(without_blank_ends(text), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  const char* key = j.contains("arguments") ? "arguments" : j.contains("parameters") ? "parameters" : nullptr;
  if (!key) return false;
  const auto& args = j[key];
  if (args.is_object()) call.arguments = args.dump();
  else if (args.is_string() && nlohmann::json::accept(args.get<std::string>())) call.arguments = args.get<std::string>();
  else return false;
  call.name = j["name"].get<std::string>();
  return true;
}

}  // namespace

std::string_view without_blank_ends(std::string_view s) {
  const size_t first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}

ToolCallSyntax tool_call_syntax(std::string_view source) {
  if (source.find(kOpen) != std::string_view::npos) return ToolCallSyntax::Tagged;
  if (source.find("ipython") != std::string_view::npos && source.find("\"parameters\"") != std::string_view::npos)
    return ToolCallSyntax::BareJson;
  return ToolCallSyntax::None;
}

SplitReply split_tool_calls(ToolCallSyntax syntax, std::string_view reply) {
  SplitReply out;
  if (syntax == ToolCallSyntax::BareJson) {
    ToolCall call;
    if (parse_call(reply, call)) out.calls.push_back(std::move(call));
    else out.content = reply;
    return out;
  }
  if (syntax == ToolCallSyntax::Tagged) {
    size_t at = 0;
    for (size_t open; (open = reply.find(kOpen, at)) != std::string_view::npos;) {
      const size_t body = open + kOpen.size();
      const size_t close = std::min(reply.find(kClose, body), reply.size());  // the last may be cut off by max_tokens
      ToolCall call;
      if (!parse_call(reply.substr(body, close - body), call)) return {std::string(reply), {}};
      out.content += reply.substr(at, open - at);
      out.calls.push_back(std::move(call));
      at = std::min(close + kClose.size(), reply.size());
    }
    out.content += reply.substr(at);
    return out;
  }
  out.content = reply;
  return out;
}

size_t surely_content(ToolCallSyntax syntax, std::string_view reply) {
  if (syntax == ToolCallSyntax::BareJson) {
    const std::string_view t = without_blank_ends(reply);
    return t.empty() || t.front() == '{' ? 0 : reply.size();
  }
  if (syntax != ToolCallSyntax::Tagged) return reply.size();
  if (const size_t open = reply.find(kOpen); open != std::string_view::npos) return open;
  // A tag may be arriving: hold back an end of the reply that begins it.
  for (size_t keep = std::min(kOpen.size() - 1, reply.size()); keep > 0; --keep)
    if (reply.substr(reply.size() - keep) == kOpen.substr(0, keep)) return reply.size() - keep;
  return reply.size();
}

}  // namespace shardlm::serve
