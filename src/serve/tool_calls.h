// Tool calls in a model's reply, read in the form its chat template taught
// it, for the OpenAI API's message.tool_calls (finish_reason "tool_calls").
// The form is told by the template's text:
//   Tagged:   <tool_call>{"name": ..., "arguments": {...}}</tool_call>, any
//             number of them, text around them is content (Qwen2.5, Qwen3,
//             QwQ, Hermes);
//   BareJson: the whole reply is {"name": ..., "parameters": {...}}
//             (Llama 3.1-3.3; its <|python_tag|> is a control token, not text);
//   DeepSeek: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}
//             <｜tool▁call▁end｜>...<｜tool▁calls▁end｜> (V3.1), or the R1/V3
//             call body "function<｜tool▁sep｜>NAME\n```json\n{...}\n```";
//   Kimi:     <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0
//             <|tool_call_argument_begin|>{...}<|tool_call_end|>...
//             <|tool_calls_section_end|> (Kimi K2);
//   Mistral:  [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] (Nemo), or
//             [TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...} per call (Small 3.2; the
//             call id optional).
// The markers of the last three are special tokens in their vocabularies; a
// reply read for calls keeps their text (tool_call_markers). A call ends
// after its JSON (a marker inside a string is text); text after the calls is
// content. A reply whose would-be calls are not such JSON stays content, unchanged.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace shardlm::serve {

enum class ToolCallSyntax { None, Tagged, BareJson, DeepSeek, Kimi, Mistral };

// The form a chat template asks for, from its text; None when it shows none.
ToolCallSyntax tool_call_syntax(std::string_view template_source);

// The texts of the markers of a form's calls (for a vocabulary's special
// tokens whose text a reply read for calls must keep).
std::vector<std::string_view> tool_call_markers(ToolCallSyntax syntax);

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object's text, as the API sends it
  // The call's id where the form carries one (Mistral's, made up when the
  // model gave none: its template takes only 9 letters and digits); empty:
  // the response names it.
  std::string id;
};

struct SplitReply {
  std::string content;  // the text outside the calls, as it came (not trimmed)
  std::vector<ToolCall> calls;
};

SplitReply split_tool_calls(ToolCallSyntax syntax, std::string_view reply);

// `s` without the spaces, tabs and line ends around a call or its reply.
std::string_view without_blank_ends(std::string_view s);

// How many bytes of a reply so far are content whatever comes next: those
// before anything that may begin a call (a streamed reply holds the rest back).
size_t surely_content(ToolCallSyntax syntax, std::string_view reply_so_far);

}  // namespace shardlm::serve
