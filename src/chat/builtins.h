// What templates can call on values: jinja2's filters and tests that chat
// templates use (filters.cpp), and the Python methods of str, dict and list
// plus attribute and item lookup with jinja2's fallbacks (methods.cpp).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "chat/value.h"

namespace shardlm::chat {

bool has_filter(std::string_view name);
bool has_test(std::string_view name);
Value apply_filter(Interpreter& in, std::string_view name, const Value& input, const CallArgs& args);
bool apply_test(std::string_view name, const Value& value, const CallArgs& args);

// `obj.name`: a dict's key (or its method), a str/list method, else undefined.
// Throws RenderError when obj itself is undefined, as jinja2 does.
Value get_attribute(const Value& obj, const std::string& name);
// `obj[key]`: index, key, or (for a string key) attribute; undefined when missing.
Value get_item(const Value& obj, const Value& key);
// `obj[start:stop:step]` of a list or string; null pointers are omitted bounds.
Value get_slice(const Value& obj, const Value* start, const Value* stop, const Value* step);
// `obj.name(args)`, or nullopt when obj's type has no such method.
std::optional<Value> call_method(const Value& obj, std::string_view name, const CallArgs& args);

// What `for` and the list filters walk: a list's items, a dict's keys, a
// string's characters (UTF-8 sequences); undefined walks as empty. Anything
// else is a RenderError, prefixed with `what` (the filter's name) if given.
List iteration_items(const Value& v, std::string_view what);

// Error for using an undefined value where jinja2 fails.
[[noreturn]] void fail_undefined(const Value& v);

// Python's str.strip family; `chars` null means whitespace.
enum class StripSide { Both, Left, Right };
std::string python_strip(std::string_view s, const Value* chars, StripSide side);

}  // namespace shardlm::chat
