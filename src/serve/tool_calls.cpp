#include "serve/tool_calls.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>
#include <random>

#include "core/text.h"

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
  return ToolCall{j["name"].get<std::string>(), std::move(*args), {}};
}

std::optional<ToolCall> call_of(std::string_view text) {
  return call_of(nlohmann::json::parse(without_blank_ends(text), nullptr, /*allow_exceptions=*/false));
}

std::optional<ToolCall> named_call(std::string_view name, std::string_view arguments) {
  name = without_blank_ends(name);
  auto args = arguments_of(arguments);
  if (name.empty() || !args) return std::nullopt;
  return ToolCall{std::string(name), std::move(*args), {}};
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

// The index after the JSON object or list that starts at s[at], or npos
// when it does not close: a marker inside one of its strings is text.
size_t json_end(std::string_view s, size_t at) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = at; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

// Where `marker` ends a call whose body starts at `from`: after the JSON in the body, if any.
size_t find_after_json(std::string_view s, size_t from, std::string_view marker) {
  const size_t plain = s.find(marker, from), json = s.find_first_of("{[", from);
  if (json < plain)
    if (const size_t end = json_end(s, json); end != std::string_view::npos) return s.find(marker, end);
  return plain;
}

// Calls between begin and end markers from the start of `section` (the last
// may be cut off by max_tokens); `consumed` is set past the last.
template <typename ParseBody>
std::optional<std::vector<ToolCall>> marked_calls(std::string_view section, std::string_view begin, std::string_view end,
                                                  ParseBody parse_body, size_t& consumed) {
  std::vector<ToolCall> calls;
  consumed = 0;
  for (size_t at = section.find(begin); at != std::string_view::npos; at = section.find(begin, consumed)) {
    const size_t body = at + begin.size();
    const size_t close = std::min(find_after_json(section, body, end), section.size());
    auto call = parse_body(section.substr(body, close - body));
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
    consumed = std::min(close + end.size(), section.size());
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

// Mistral's templates take only call ids of 9 letters and digits.
std::string mistral_call_id() {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id(9, ' ');
  for (char& c : id) c = kAlphabet[rng() % (sizeof kAlphabet - 1)];
  return id;
}

// Mistral's calls after [TOOL_CALLS]: a JSON list (Nemo), or
// NAME[CALL_ID]ID[ARGS]{...} each behind its own [TOOL_CALLS] (Small 3.2);
// `consumed` is set past the last. A call keeps the id the model gave it.
std::optional<std::vector<ToolCall>> mistral_calls(std::string_view after, size_t& consumed) {
  std::vector<ToolCall> calls;
  const size_t first = after.find_first_not_of(kBlanksAndLineEnds);
  if (first != std::string_view::npos && after[first] == '[') {
    consumed = json_end(after, first);
    if (consumed == std::string_view::npos) return std::nullopt;
    const auto list = nlohmann::json::parse(after.substr(first, consumed - first), nullptr, /*allow_exceptions=*/false);
    if (!list.is_array() || list.empty()) return std::nullopt;
    for (const auto& j : list) {
      auto call = call_of(j);
      if (!call) return std::nullopt;
      if (j.contains("id") && j["id"].is_string()) call->id = j["id"].get<std::string>();
      calls.push_back(std::move(*call));
    }
  } else {
    for (size_t at = 0;;) {
      const size_t args = after.find(kMistralArguments, at);
      if (args == std::string_view::npos) return std::nullopt;
      const size_t json = after.find_first_not_of(kBlanksAndLineEnds, args + kMistralArguments.size());
      const size_t end = json == std::string_view::npos ? json : json_end(after, json);
      if (end == std::string_view::npos) return std::nullopt;
      std::string_view head = after.substr(at, args - at);
      std::string id;
      if (const size_t mark = head.find(kMistralCallId); mark != std::string_view::npos) {
        id = std::string(without_blank_ends(head.substr(mark + kMistralCallId.size())));
        head = head.substr(0, mark);
      }
      auto call = named_call(head, after.substr(json, end - json));
      if (!call) return std::nullopt;
      call->id = std::move(id);
      calls.push_back(std::move(*call));
      consumed = end;
      const size_t next = after.find_first_not_of(kBlanksAndLineEnds, end);
      if (next == std::string_view::npos || after.substr(next, kMistralCalls.size()) != kMistralCalls) break;
      at = next + kMistralCalls.size();
    }
  }
  for (ToolCall& c : calls)
    if (c.id.empty()) c.id = mistral_call_id();
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

std::string_view without_blank_ends(std::string_view s) { return without_ends(s, kBlanksAndLineEnds); }

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
      const size_t close = std::min(find_after_json(reply, body, kTagClose), reply.size());  // the last may be cut off by max_tokens
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
  const std::string_view calls_text = reply.substr(open);
  size_t consumed = 0;  // of calls_text
  std::optional<std::vector<ToolCall>> calls;
  std::string_view section_end;
  if (syntax == ToolCallSyntax::DeepSeek) {
    calls = marked_calls(calls_text, kDeepSeekCallBegin, kDeepSeekCallEnd, deepseek_call, consumed);
    section_end = kDeepSeekCallsEnd;
  } else if (syntax == ToolCallSyntax::Kimi) {
    calls = marked_calls(calls_text, kKimiCallBegin, kKimiCallEnd, kimi_call, consumed);
    section_end = kKimiSectionEnd;
  } else if (syntax == ToolCallSyntax::Mistral) {
    calls = mistral_calls(calls_text.substr(kMistralCalls.size()), consumed);
    consumed += kMistralCalls.size();
  }
  if (!calls) return unchanged;
  // Text after the calls (and their section's end marker) is content too.
  if (!section_end.empty())
    if (const size_t end = calls_text.find(section_end, consumed); end != std::string_view::npos)
      consumed = end + section_end.size();
  return {std::string(reply.substr(0, open)) + std::string(calls_text.substr(consumed)), std::move(*calls)};
}

size_t surely_content(ToolCallSyntax syntax, std::string_view reply) {
  if (syntax == ToolCallSyntax::BareJson) {
    const std::string_view t = without_blank_ends(reply);
    return t.empty() || t.front() == '{' ? 0 : reply.size();
  }
  if (const size_t open = first_opener(syntax, reply); open != std::string_view::npos) return open;
  // An opener may be arriving: hold back an end of the reply that begins one.
  size_t keep = 0;
  for (const std::string_view o : openers(syntax)) keep = std::max(keep, partial_start_at_end(reply, o));
  return reply.size() - keep;
}

}  // namespace shardlm::serve
