// What a chat template can fail with. A server answers ParseError with 500
// (the model's template is broken) and the others with 400: the request
// made the template fail, and RaisedError carries the template's own words.
#pragma once

#include <fmt/format.h>
#include <string>

#include "core/error.h"

namespace shardlm::chat {

class TemplateError : public shardlm::Error {
 public:
  using shardlm::Error::Error;
};

// The template text is not valid Jinja (or uses what we do not implement).
class ParseError : public TemplateError {
 public:
  ParseError(const std::string& message, int line, int column)
      : TemplateError(fmt::format("chat template line {}, column {}: {}", line, column, message)),
        line(line), column(column) {}
  int line, column;
};

// Rendering failed: a type error, an undefined value used where Jinja fails.
class RenderError : public TemplateError {
 public:
  using TemplateError::TemplateError;
};

// The template called raise_exception(message); what() is that message.
class RaisedError : public TemplateError {
 public:
  using TemplateError::TemplateError;
};

}  // namespace shardlm::chat
