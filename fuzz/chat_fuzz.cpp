// libFuzzer entry: any template text (a GGUF's tokenizer.chat_template is
// untrusted) must parse and render a conversation, or raise one of the
// template errors; every other outcome (crash, sanitizer report, another
// exception, a hang) is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

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
  return 0;
}
