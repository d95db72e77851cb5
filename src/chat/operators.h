// Python's operators on template values: arithmetic with int/float
// promotion and floor semantics, concatenation of str and list, comparison,
// membership. Undefined operands fail as jinja2's default Undefined does.
#pragma once

#include <string_view>

#include "chat/value.h"

namespace shardlm::chat {

// op: + - * / // % ** ~ == != < <= > >= in "not in"
Value binary_operation(std::string_view op, const Value& left, const Value& right);
// op: - +
Value unary_arithmetic(std::string_view op, const Value& v);
// Python's `needle in haystack` (substring, list item, dict key; false for undefined).
bool contains(const Value& haystack, const Value& needle);
// Python's a < b for numbers, strings and lists; throws for other types.
bool less_than(const Value& a, const Value& b);

}  // namespace shardlm::chat
