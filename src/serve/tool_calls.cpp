#include "serve/tool_calls.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>

namespace shardlm::serve {
namespace {

constexpr std::string_view kTagOpen = "<tool_call>", kTagClose = "</tool_call>";
constexpr std::string_view kDeepSeekCallsBegin = "<｜tool▁calls▁begin｜>", kDeepSeekCallsEnd = "<｜tool▁calls▁end｜>",
                           kDeepSeekCallBegin = "<｜tool▁call▁begin｜>", kDeepSeekCallEnd = "<｜tool▁call▁end｜>",
                           kDeepSeekSep = "<｜tool▁sep｜>";
constexpr std::string_view kKimiSectionBegin = "<|tool_calls_section_begin|>", kKimiSectionEnd = "<|tool_calls_section_end|>",
                           kKimiCallBegin = "<|tool_call_begin|>", kKimiArguments = "<|tool_call_argument_begin|>",
                           kKimiCallEnd = "<|tool_call_end|>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]", kMistralCallId = "[CALL_ID]", kMistralArguments = "[ARGS]";

// A JSON object's text (or one given as a string holding it) as the API sends arguments.
std::optional<std::string> arguments_of(const nlohmann::json& args) {
  if (args.is_object()) return args.dump();
  if (args.is_string() && nlohmann::json::parse(args.get<std::string>(), nullptr, false).is_object())
    return args.get<std::string>();
  return std::nullopt;
}

std::optional<std::string> arguments_of(std::string_view text) {
  return arguments_of(nlohmann::json::parse(without_blank_ends(text), nullptr, /*allow_exceptions=*/false));
}

// {"name": string, "arguments" or "parameters": object or its text}.
std::optional<ToolCall> call_of(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  const char* key = j.contains("arguments") ? "arguments" : j.contains("parameters") ? "parameters" : nullptr;
  if (!key) return std::nullopt;
  auto args = arguments_of(j[key]);
  if (!args) return std::nullopt;
  return ToolCall{j["name"].get<std::string>(), std::move(*args)};
}

std::optional<ToolCall> call_of(std::string_view text) {
  return call_of(nlohmann::json::parse(without_blank_ends(text), nullptr, /*allow_exceptions=*/false));
}

std::optional<ToolCall> named_call(std::string_view name, std::string_view arguments) {
  name = without_blank_ends(name);
  auto args = arguments_of(arguments);
  if (name.empty() || !args) return std::nullopt;
  return ToolCall{std::string(name), std::move(*args)};
}

// A call body of DeepSeek's: "NAME<｜tool▁sep｜>{...}" (V3.1) or
// "function<｜tool▁sep｜>NAME\n```json\n{...}\n```" (R1, V3).
std::optional<ToolCall> deepseek_call(std::string_view body) {
  const size_t sep = body.find(kDeepSeekSep);
  if (sep == std::string_view::npos) return std::nullopt;
  const std::string_view head = without_blank_ends(body.substr(0, sep));
  std::string_view rest = without_blank_ends(body.substr(sep + kDeepSeekSep.size()));
  if (head != "function") return named_call(head, rest);
  const size_t line = rest.find('\n');
  if (line == std::string_view::npos) return std::nullopt;
  std::string_view args = without_blank_ends(rest.substr(line + 1));
  if (args.starts_with("```json")) args.remove_prefix(7);
  if (args.ends_with("```")) args.remove_suffix(3);
  return named_call(rest.substr(0, line), args);
}

// A call body of Kimi's: "functions.NAME:INDEX<|tool_call_argument_begin|>{...}".
std::optional<ToolCall> kimi_call(std::string_view body) {
  const size_t sep = body.find(kKimiArguments);
  if (sep == std::string_view::npos) return std::nullopt;
  std::string_view id = without_blank_ends(body.substr(0, sep));
  if (id.starts_with("functions.")) id.remove_prefix(10);
  if (const size_t colon = id.rfind(':'); colon != std::string_view::npos) id = id.substr(0, colon);
  return named_call(id, body.substr(sep + kKimiArguments.size()));
}

// Calls between begin and end markers in `section` (the last may be cut off by max_tokens).
template <typename ParseBody>
std::optional<std::vector<ToolCall>> marked_calls(std::string_view section, std::string_view begin, std::string_view end,
                                                  ParseBody parse_body) {
  std::vector<ToolCall> calls;
  for (size_t at = section.find(begin); at != std::string_view::npos; at = section.find(begin, at)) {
    const size_t body = at + begin.size();
    const size_t close = std::min(section.find(end, body), section.size());
    auto call = parse_body(section.substr(body, close - body));
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
    at = close;
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

// Mistral's calls after [TOOL_CALLS]: a JSON list (Nemo), or NAME[CALL_ID]ID[ARGS]{...} each (Small 3.2).
std::optional<std::vector<ToolCall>> mistral_calls(std::string_view after) {
  std::vector<ToolCall> calls;
  if (without_blank_ends(after).starts_with('[')) {
    const auto list = nlohmann::json::parse(without_blank_ends(after), nullptr, /*allow_exceptions=*/false);
    if (!list.is_array() || list.empty()) return std::nullopt;
    for (const auto& j : list) {
      auto call = call_of(j);
      if (!call) return std::nullopt;
      calls.push_back(std::move(*call));
    }
    return calls;
  }
  for (size_t at = 0; at <= after.size();) {
    const size_t next = std::min(after.find(kMistralCalls, at), after.size());
    const std::string_view one = after.substr(at, next - at);
    const size_t args = one.find(kMistralArguments);
    if (args == std::string_view::npos) return std::nullopt;
    auto call = named_call(one.substr(0, std::min(one.find(kMistralCallId), args)), one.substr(args + kMistralArguments.size()));
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
    at = next + kMistralCalls.size();
  }
  return calls;
}

// Where a form's calls may begin: its openers.
std::vector<std::string_view> openers(ToolCallSyntax syntax) {
  switch (syntax) {
    case ToolCallSyntax::Tagged: return {kTagOpen};
    case ToolCallSyntax::DeepSeek: return {kDeepSeekCallsBegin, kDeepSeekCallBegin};  // R1 may skip the first
    case ToolCallSyntax::Kimi: return {kKimiSectionBegin, kKimiCallBegin};
    case ToolCallSyntax::Mistral: return {kMistralCalls};
    default: return {};
  }
}

size_t first_opener(ToolCallSyntax syntax, std::string_view reply) {
  size_t first = std::string_view::npos;
  for (const std::string_view o : openers(syntax)) first = std::min(first, reply.find(o));
  return first;
}

}  // namespace

std::string_view without_blank_ends(std::string_view s) {
  const size_t first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}

ToolCallSyntax tool_call_syntax(std::string_view source) {
  const auto has = [&](std::string_view s) { return source.find(s) != std::string_view::npos; };
  if (has(kDeepSeekCallBegin)) return ToolCallSyntax::DeepSeek;
  if (has(kKimiCallBegin)) return ToolCallSyntax::Kimi;
  if (has(kMistralCalls)) return ToolCallSyntax::Mistral;
  if (has(kTagOpen)) return ToolCallSyntax::Tagged;
  if (has("ipython") && has("\"parameters\"")) return ToolCallSyntax::BareJson;
  return ToolCallSyntax::None;
}

std::vector<std::string_view> tool_call_markers(ToolCallSyntax syntax) {
  switch (syntax) {
    case ToolCallSyntax::Tagged: return {kTagOpen, kTagClose};
    case ToolCallSyntax::DeepSeek:
      return {kDeepSeekCallsBegin, kDeepSeekCallsEnd, kDeepSeekCallBegin, kDeepSeekCallEnd, kDeepSeekSep};
    case ToolCallSyntax::Kimi: return {kKimiSectionBegin, kKimiSectionEnd, kKimiCallBegin, kKimiArguments, kKimiCallEnd};
    case ToolCallSyntax::Mistral: return {kMistralCalls, kMistralCallId, kMistralArguments};
    default: return {};
  }
}

SplitReply split_tool_calls(ToolCallSyntax syntax, std::string_view reply) {
  const SplitReply unchanged{std::string(reply), {}};
  if (syntax == ToolCallSyntax::BareJson) {
    if (auto call = call_of(reply)) return {{}, {std::move(*call)}};
    return unchanged;
  }
  if (syntax == ToolCallSyntax::Tagged) {
    SplitReply out;
    size_t at = 0;
    for (size_t open; (open = reply.find(kTagOpen, at)) != std::string_view::npos;) {
      const size_t body = open + kTagOpen.size();
      const size_t close = std::min(reply.find(kTagClose, body), reply.size());  // the last may be cut off by max_tokens
      auto call = call_of(reply.substr(body, close - body));
      if (!call) return unchanged;
      out.content += reply.substr(at, open - at);
      out.calls.push_back(std::move(*call));
      at = std::min(close + kTagClose.size(), reply.size());
    }
    out.content += reply.substr(at);
    return out;
  }
  const size_t open = first_opener(syntax, reply);
  if (open == std::string_view::npos) return unchanged;
  // The calls end the reply, or their section's end marker does.
  std::string_view section = reply.substr(open), after;
  const std::string_view section_end = syntax == ToolCallSyntax::DeepSeek ? kDeepSeekCallsEnd
                                       : syntax == ToolCallSyntax::Kimi   ? kKimiSectionEnd
                                                                          : std::string_view();
  if (const size_t end = section_end.empty() ? std::string_view::npos : section.find(section_end); end != std::string_view::npos) {
    after = section.substr(end + section_end.size());
    section = section.substr(0, end);
  }
  std::optional<std::vector<ToolCall>> calls;
  if (syntax == ToolCallSyntax::DeepSeek) calls = marked_calls(section, kDeepSeekCallBegin, kDeepSeekCallEnd, deepseek_call);
  else if (syntax == ToolCallSyntax::Kimi) calls = marked_calls(section, kKimiCallBegin, kKimiCallEnd, kimi_call);
  else if (syntax == ToolCallSyntax::Mistral) calls = mistral_calls(section.substr(kMistralCalls.size()));
  if (!calls) return unchanged;
  return {std::string(reply.substr(0, open)) + std::string(after), std::move(*calls)};
}

size_t surely_content(ToolCallSyntax syntax, std::string_view reply) {
  if (syntax == ToolCallSyntax::BareJson) {
    const std::string_view t = without_blank_ends(reply);
    return t.empty() || t.front() == '{' ? 0 : reply.size();
  }
  if (const size_t open = first_opener(syntax, reply); open != std::string_view::npos) return open;
  // An opener may be arriving: hold back an end of the reply that begins one.
  size_t keep = 0;
  for (const std::string_view o : openers(syntax))
    for (size_t n = std::min(o.size() - 1, reply.size()); n > keep; --n)
      if (reply.substr(reply.size() - n) == o.substr(0, n)) {
        keep = n;
        break;
      }
  return reply.size() - keep;
}

}  // namespace shardlm::serve
