// libFuzzer entry for the chat templates' two untrusted inputs. Any text, as a
// template (a GGUF's tokenizer.chat_template), must parse and render a fixed
// conversation or raise a template error; and, where it is JSON, as the body
// of a chat request (what `serve` gets over HTTP), it must become a template
// context and render with a fixed template, or raise shardlm::Error. Every
// other outcome (crash, sanitizer report, another exception, a hang) is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "chat/request_context.h"
#include "chat/template.h"

namespace {

// A conversation that reaches what real templates branch on: a system
// message, tools, a tool call with its result, reasoning, a multi-part user
// message and the generation prompt.
const nlohmann::ordered_json& context() {
  static const auto c = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
      {"role": "assistant", "content": "", "reasoning_content": "Call the tool.",
       "tool_calls": [{"id": "call_1", "type": "function",
                       "function": {"name": "weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"},
      {"role": "assistant", "content": "21 °C."},
      {"role": "user", "content": "Thanks"}
    ],
    "tools": [{"type": "function", "function": {"name": "weather", "description": "Current weather",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                              "required": ["city"]}}}],
    "add_generation_prompt": true,
    "bos_token": "<s>",
    "eos_token": "</s>",
    "enable_thinking": false
  })");
  return c;
}

// A ChatML-style template that reads what requests carry: a system message,
// tools, text parts, tool calls and their results.
const shardlm::chat::Template& request_template() {
  static const shardlm::chat::Template t(R"({%- if tools %}<|im_start|>system
{{ messages[0].content if messages and messages[0].role == 'system' else '' }}
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}<|im_end|>
{% endif -%}
{%- for m in messages %}<|im_start|>{{ m.role }}
{% if m.content is string %}{{ m.content }}{% elif m.content %}{% for part in m.content %}{% if part.type == 'text' %}{{ part.text }}{% endif %}{% endfor %}{% endif %}
{%- for call in m.tool_calls or [] %}<tool_call>{{ call.function | tojson }}</tool_call>{% endfor %}<|im_end|>
{% endfor -%}
{% if add_generation_prompt %}<|im_start|>assistant
{% if enable_thinking is false %}<think></think>{% endif %}{% endif %})");
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardlm::chat;
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  try {
    const Template t(source);
    RenderOptions options;
    options.today = calendar_date(2026, 12, 6);
    (void)t.render(context(), options);
  } catch (const TemplateError&) {
  }
  const auto body = nlohmann::ordered_json::parse(source, nullptr, false);
  if (body.is_discarded()) return 0;
  try {
    (void)request_template().render(context_from_request(body));
  } catch (const shardlm::Error&) {
  }
  return 0;
}
