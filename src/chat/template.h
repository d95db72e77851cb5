// A chat template (the Jinja text a GGUF carries in tokenizer.chat_template)
// parsed once and rendered for any number of conversations, with the
// conventions of Hugging Face's apply_chat_template: trim_blocks,
// lstrip_blocks, loop controls, raise_exception(), strftime_now(), and a
// tojson filter that is Python's json.dumps (ensure_ascii=False).
//
//   chat::Template t(gguf_template_text);        // throws ParseError
//   std::string prompt = t.render(context);      // throws RenderError / RaisedError
//
// The context is a JSON object whose keys become the template's variables:
// messages, tools, add_generation_prompt, bos_token, eos_token and any extra
// keyword (enable_thinking, ...). It is an ordered_json because json.dumps
// keeps a dict's key order; a request must be parsed into ordered_json for
// the rendered tool schemas to match what the model was trained on.
#pragma once

#include <ctime>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "chat/ast.h"
#include "chat/errors.h"

namespace shardlm::chat {

struct RenderOptions {
  // The date strftime_now() reports (only the date fields and tm_wday/tm_yday
  // matter); unset means the local clock.
  std::optional<std::tm> today;
};

class Template {
 public:
  explicit Template(std::string_view source);
  Template(Template&&) noexcept = default;
  Template& operator=(Template&&) noexcept = default;

  std::string render(const nlohmann::ordered_json& context, const RenderOptions& options = {}) const;

 private:
  Body body_;
};

// A std::tm for the given calendar date, with weekday and day of year filled in.
std::tm calendar_date(int year, int month, int day);

}  // namespace shardlm::chat
