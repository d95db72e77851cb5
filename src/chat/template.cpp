#include "chat/template.h"

#include <fmt/format.h>

#include "chat/interpreter.h"
#include "chat/lexer.h"
#include "chat/parser.h"

namespace shardlm::chat {

Template::Template(std::string_view source) : body_(parse(lex(source))) {}

std::string Template::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  if (!context.is_object()) throw RenderError("chat template context must be a JSON object");
  Interpreter interpreter(options.today);
  try {
    return interpreter.render(body_, Value::from_json(context));
  } catch (const RaisedError&) {
    throw;
  } catch (const RenderError& e) {
    throw RenderError(fmt::format("chat template line {}: {}", interpreter.line(), e.what()));
  }
}

std::tm calendar_date(int year, int month, int day) {
  std::tm t{};
  t.tm_year = year - 1900;
  t.tm_mon = month - 1;
  t.tm_mday = day;
  t.tm_hour = 12;  // away from midnight, so no time zone moves the date
  std::time_t seconds = timegm(&t);
  gmtime_r(&seconds, &t);
  t.tm_hour = 0;
  return t;
}

}  // namespace shardlm::chat
