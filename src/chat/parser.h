// Builds the statement tree of a template from its tokens, with jinja2's
// operator precedence. Throws ParseError naming line and column.
#pragma once

#include <vector>

#include "chat/ast.h"
#include "chat/lexer.h"

namespace shardlm::chat {

Body parse(const std::vector<Token>& tokens);

}  // namespace shardlm::chat
