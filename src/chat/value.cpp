#include "chat/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fmt/format.h>
#include <limits>

#include "core/text.h"

namespace shardlm::chat {

namespace {

const std::string kEmpty;

bool is_utf8_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Decodes one UTF-8 code point at s[i]; invalid bytes decode as themselves.
uint32_t next_code_point(std::string_view s, size_t& i) {
  unsigned char c = static_cast<unsigned char>(s[i++]);
  int extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
  uint32_t cp = extra == 3 ? (c & 0x07) : extra == 2 ? (c & 0x0F) : extra == 1 ? (c & 0x1F) : c;
  for (int k = 0; k < extra && i < s.size() && is_utf8_continuation(static_cast<unsigned char>(s[i])); ++k)
    cp = (cp << 6) | (static_cast<unsigned char>(s[i++]) & 0x3F);
  return cp;
}

void append_hex(std::string& out, const char* prefix, uint32_t v, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%s%0*x", prefix, digits, v);
  out += buf;
}

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; ++i; continue;
      case '\\': out += "\\\\"; ++i; continue;
      case '\n': out += "\\n"; ++i; continue;
      case '\r': out += "\\r"; ++i; continue;
      case '\t': out += "\\t"; ++i; continue;
      case '\b': out += "\\b"; ++i; continue;
      case '\f': out += "\\f"; ++i; continue;
      default: break;
    }
    if (c < 0x20) {
      append_hex(out, "\\u", c, 4);
      ++i;
    } else if (c < 0x80 || !ensure_ascii) {
      out += static_cast<char>(c);
      ++i;
    } else {
      uint32_t cp = next_code_point(s, i);
      if (cp >= 0x10000) {  // UTF-16 surrogate pair, as Python writes it
        cp -= 0x10000;
        append_hex(out, "\\u", 0xD800 + (cp >> 10), 4);
        append_hex(out, "\\u", 0xDC00 + (cp & 0x3FF), 4);
      } else {
        append_hex(out, "\\u", cp, 4);
      }
    }
  }
  out += '"';
}

void append_repr_string(std::string& out, std::string_view s) {
  // Python prefers single quotes unless the text has ' and no ".
  char quote = (s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos) ? '"' : '\'';
  out += quote;
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (ch == quote || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      append_hex(out, "\\x", c, 2);
    } else {
      out += ch;
    }
  }
  out += quote;
}

void append_repr(std::string& out, const Value& v);

void append_python_str(std::string& out, const Value& v, bool as_repr) {
  switch (v.type()) {
    case Value::Type::Undefined: return;
    case Value::Type::None: out += "None"; return;
    case Value::Type::Bool: out += v.as_bool() ? "True" : "False"; return;
    case Value::Type::Int: out += std::to_string(v.as_int()); return;
    case Value::Type::Float: out += python_float_repr(v.as_double()); return;
    case Value::Type::String:
      if (as_repr) append_repr_string(out, v.as_string());
      else out += v.as_string();
      return;
    case Value::Type::List: {
      out += '[';
      bool first = true;
      for (const Value& item : v.list()) {
        if (!first) out += ", ";
        first = false;
        append_repr(out, item);
      }
      out += ']';
      return;
    }
    case Value::Type::Dict: {
      if (v.dict().is_namespace) out += "<Namespace ";
      out += '{';
      bool first = true;
      for (const auto& [key, item] : v.dict().entries()) {
        if (!first) out += ", ";
        first = false;
        append_repr_string(out, key);
        out += ": ";
        append_repr(out, item);
      }
      out += '}';
      if (v.dict().is_namespace) out += '>';
      return;
    }
    case Value::Type::Callable:
      out += "<function " + v.callable()->name() + ">";
      return;
  }
}

void append_repr(std::string& out, const Value& v) { append_python_str(out, v, true); }

void append_json(std::string& out, const Value& v, const JsonFormat& f, int depth) {
  auto newline = [&](int level) {
    if (!f.indent) return;
    out += '\n';
    for (int k = 0; k < level; ++k) out += *f.indent;
  };
  switch (v.type()) {
    case Value::Type::None: out += "null"; return;
    case Value::Type::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Type::Int: out += std::to_string(v.as_int()); return;
    case Value::Type::Float: {
      double d = v.as_double();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
      else out += python_float_repr(d);
      return;
    }
    case Value::Type::String: append_json_string(out, v.as_string(), f.ensure_ascii); return;
    case Value::Type::List: {
      if (v.list().empty()) {
        out += "[]";
        return;
      }
      out += '[';
      bool first = true;
      for (const Value& item : v.list()) {
        if (!first) out += f.item_separator;
        first = false;
        newline(depth + 1);
        append_json(out, item, f, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::Type::Dict: {
      if (v.dict().size() == 0) {
        out += "{}";
        return;
      }
      std::vector<const Dict::Entry*> entries;
      for (const auto& e : v.dict().entries()) entries.push_back(&e);
      if (f.sort_keys)
        std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      bool first = true;
      for (const Dict::Entry* e : entries) {
        if (!first) out += f.item_separator;
        first = false;
        newline(depth + 1);
        append_json_string(out, e->first, f.ensure_ascii);
        out += f.key_separator;
        append_json(out, e->second, f, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    case Value::Type::Undefined:
      throw RenderError("tojson: Object of type Undefined is not JSON serializable");
    case Value::Type::Callable:
      throw RenderError("tojson: Object of type function is not JSON serializable");
  }
}

}  // namespace

Value Value::undefined(std::string what) {
  Value v;
  if (!what.empty()) v.ptr_ = std::make_shared<std::string>(std::move(what));
  return v;
}

Value Value::none() {
  Value v;
  v.type_ = Type::None;
  return v;
}

Value::Value(bool b) : type_(Type::Bool) { b_ = b; }
Value::Value(int64_t i) : type_(Type::Int) { i_ = i; }
Value::Value(double d) : type_(Type::Float) { f_ = d; }
Value::Value(std::string s) : type_(Type::String), ptr_(std::make_shared<std::string>(std::move(s))) {}
Value::Value(List items) : type_(Type::List), ptr_(std::make_shared<List>(std::move(items))) {}
Value::Value(std::shared_ptr<Dict> dict) : type_(Type::Dict), ptr_(std::move(dict)) {}
Value::Value(std::shared_ptr<Callable> fn) : type_(Type::Callable), ptr_(std::move(fn)) {}
Value Value::new_dict() { return Value(std::make_shared<Dict>()); }

const std::string& Value::undefined_what() const {
  if (type_ != Type::Undefined || !ptr_) return kEmpty;
  return as_string();
}

bool Value::truthy() const {
  switch (type_) {
    case Type::Undefined:
    case Type::None: return false;
    case Type::Bool: return b_;
    case Type::Int: return i_ != 0;
    case Type::Float: return f_ != 0.0;
    case Type::String: return !as_string().empty();
    case Type::List: return !list().empty();
    case Type::Dict: return dict().size() != 0;
    case Type::Callable: return true;
  }
  return false;
}

const char* Value::type_name() const {
  switch (type_) {
    case Type::Undefined: return "undefined";
    case Type::None: return "NoneType";
    case Type::Bool: return "bool";
    case Type::Int: return "int";
    case Type::Float: return "float";
    case Type::String: return "str";
    case Type::List: return "list";
    case Type::Dict: return dict().is_namespace ? "Namespace" : "dict";
    case Type::Callable: return "function";
  }
  return "?";
}

std::optional<int64_t> Value::length() const {
  switch (type_) {
    case Type::String: return utf8_chars(as_string());
    case Type::List: return static_cast<int64_t>(list().size());
    case Type::Dict: return static_cast<int64_t>(dict().size());
    case Type::Undefined: return 0;
    default: return std::nullopt;
  }
}

std::string Value::str() const {
  std::string out;
  append_str(out);
  return out;
}

std::string Value::repr() const {
  std::string out;
  append_repr(out, *this);
  return out;
}

void Value::append_str(std::string& out) const { append_python_str(out, *this, false); }

bool operator==(const Value& a, const Value& b) {
  using T = Value::Type;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case T::Undefined:
    case T::None: return true;
    case T::String: return a.as_string() == b.as_string();
    case T::List: return a.list() == b.list();
    case T::Dict: {
      if (a.dict().size() != b.dict().size()) return false;
      for (const auto& [key, value] : a.dict().entries()) {
        const Value* other = b.dict().find(key);
        if (!other || !(*other == value)) return false;
      }
      return true;
    }
    case T::Callable: return a.callable() == b.callable();
    default: return false;
  }
}

namespace {
// JSON nested deeper than this is refused rather than risk the stack in the
// recursive walks over values (conversion, json.dumps, equality).
constexpr int kMaxJsonDepth = 256;
}  // namespace

Value Value::from_json(const nlohmann::ordered_json& j) { return from_json(j, 0); }

Value Value::from_json(const nlohmann::ordered_json& j, int depth) {
  using J = nlohmann::ordered_json::value_t;
  if (depth > kMaxJsonDepth)
    throw RenderError(fmt::format("chat template context nested deeper than {} levels", kMaxJsonDepth));
  switch (j.type()) {
    case J::null: return none();
    case J::boolean: return Value(j.get<bool>());
    case J::number_integer: return Value(j.get<int64_t>());
    case J::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case J::number_float: return Value(j.get<double>());
    case J::string: return Value(j.get_ref<const std::string&>());
    case J::array: {
      List items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(from_json(item, depth + 1));
      return Value(std::move(items));
    }
    case J::object: {
      auto dict = std::make_shared<Dict>();
      for (const auto& [key, item] : j.items()) dict->append_new(key, from_json(item, depth + 1));
      return Value(std::move(dict));
    }
    default: return none();  // binary / discarded do not come from JSON text
  }
}

nlohmann::ordered_json Value::to_json() const {
  switch (type_) {
    case Type::None: return nullptr;
    case Type::Bool: return b_;
    case Type::Int: return i_;
    case Type::Float: return f_;
    case Type::String: return as_string();
    case Type::List: {
      auto j = nlohmann::ordered_json::array();
      for (const Value& item : list()) j.push_back(item.to_json());
      return j;
    }
    case Type::Dict: {
      auto j = nlohmann::ordered_json::object();
      for (const auto& [key, item] : dict().entries()) j[key] = item.to_json();
      return j;
    }
    default: throw RenderError(fmt::format("a {} value has no JSON form", type_name()));
  }
}

const Value* Dict::find(std::string_view key) const {
  for (const Entry& e : entries_)
    if (e.first == key) return &e.second;
  return nullptr;
}

Value* Dict::find(std::string_view key) {
  for (Entry& e : entries_)
    if (e.first == key) return &e.second;
  return nullptr;
}

void Dict::append_new(std::string key, Value v) { entries_.emplace_back(std::move(key), std::move(v)); }

void Dict::set(std::string key, Value v) {
  if (Value* existing = find(key)) *existing = std::move(v);
  else entries_.emplace_back(std::move(key), std::move(v));
}

const Value* CallArgs::get(size_t index, std::string_view name) const {
  if (index < positional.size()) return &positional[index];
  return named(name);
}

const Value* CallArgs::named(std::string_view name) const {
  for (const auto& [key, value] : keyword)
    if (key == name) return &value;
  return nullptr;
}

std::string json_dumps(const Value& v, const JsonFormat& format) {
  std::string out;
  append_json(out, v, format, 0);
  return out;
}

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, then Python's layout: fixed notation for
  // decimal exponents in [-4, 16), scientific with a two-digit exponent else.
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(end - buf));
  bool negative = sci.front() == '-';
  if (negative) sci.remove_prefix(1);
  size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos))
    if (c != '.') digits += c;
  int exponent = std::stoi(std::string(sci.substr(e_pos + 1)));
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    int point = exponent + 1;  // digits before the decimal point
    if (point <= 0) {
      out.append("0.").append(static_cast<size_t>(-point), '0').append(digits);
    } else if (static_cast<size_t>(point) >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(point) - digits.size(), '0') + ".0";
    } else {
      out.append(digits, 0, static_cast<size_t>(point)).append(".").append(digits, static_cast<size_t>(point));
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out.append(".").append(digits, 1);
    char exp[16];
    std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp;
  }
  return out;
}

}  // namespace shardlm::chat
