// Splits a Jinja template into text and the tokens inside its tags, applying
// whitespace control the way Hugging Face configures jinja2 for chat
// templates: trim_blocks, lstrip_blocks, `-`/`+` markers, and one trailing
// newline of the template dropped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace shardlm::chat {

enum class TokenKind {
  Text,        // literal output between tags (after whitespace control)
  BlockBegin,  // {%
  BlockEnd,    // %}
  VarBegin,    // {{
  VarEnd,      // }}
  Name,
  String,      // text holds the unescaped value
  Integer,
  Float,
  Operator,    // text holds the symbol: + - * / // % ** ~ == != < <= > >= = . , : | ( ) [ ] { }
  End,
};

struct Token {
  TokenKind kind;
  std::string text;
  int line = 1, column = 1;
};

// Throws ParseError (unterminated tag, comment or string; stray character).
std::vector<Token> lex(std::string_view source);

}  // namespace shardlm::chat
