// Tool calls in a model's reply, read in the form its chat template taught
// it, for the OpenAI API's message.tool_calls (finish_reason "tool_calls").
// Two forms cover the templates of the Qwen2.5/Qwen3/QwQ and Hermes families
// and of Llama 3.1-3.3:
//   Tagged:   <tool_call>{"name": ..., "arguments": {...}}</tool_call>, any
//             number of them, text around them is content;
//   BareJson: the whole reply is {"name": ..., "parameters": {...}}
//             (Llama's <|python_tag|> before it is a control token, not text).
// A reply whose would-be call is not such JSON stays content, unchanged.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace shardlm::serve {

enum class ToolCallSyntax { None, Tagged, BareJson };

// The form a chat template asks for, from its text; None when it shows none.
ToolCallSyntax tool_call_syntax(std::string_view template_source);

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object's text, as the API sends it
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
