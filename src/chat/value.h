// The values a chat template computes with, with Python's semantics where a
// template can see them (jinja2 runs on Python): truthiness, equality, str(),
// repr() and json.dumps. Lists and dicts are shared by reference as in
// Python, so `ns.items` seen through two names is one list. Dicts keep
// insertion order, because json.dumps of a tool schema must list the keys
// in the order the request gave them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/errors.h"

namespace shardlm::chat {

class Value;
using List = std::vector<Value>;
class Dict;
struct Callable;

class Value {
 public:
  enum class Type : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Callable };

  Value() = default;  // undefined
  static Value undefined(std::string what = {});  // `what` names it in error messages
  static Value none();
  Value(bool b);
  Value(int64_t i);
  Value(int i) : Value(static_cast<int64_t>(i)) {}
  Value(double d);
  Value(std::string s);
  Value(std::string_view s) : Value(std::string(s)) {}
  Value(const char* s) : Value(std::string(s)) {}
  Value(List items);
  Value(std::shared_ptr<Dict> dict);
  Value(std::shared_ptr<Callable> fn);
  static Value new_dict();

  Type type() const { return type_; }
  bool is_undefined() const { return type_ == Type::Undefined; }
  bool is_none() const { return type_ == Type::None; }
  bool is_bool() const { return type_ == Type::Bool; }
  bool is_int() const { return type_ == Type::Int; }
  bool is_float() const { return type_ == Type::Float; }
  bool is_number() const { return type_ == Type::Int || type_ == Type::Float || type_ == Type::Bool; }
  bool is_string() const { return type_ == Type::String; }
  bool is_list() const { return type_ == Type::List; }
  bool is_dict() const { return type_ == Type::Dict; }
  bool is_callable() const { return type_ == Type::Callable; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return type_ == Type::Bool ? (b_ ? 1 : 0) : i_; }
  double as_double() const { return type_ == Type::Float ? f_ : static_cast<double>(as_int()); }
  const std::string& as_string() const { return *static_cast<const std::string*>(ptr_.get()); }
  List& list() const { return *static_cast<List*>(ptr_.get()); }
  Dict& dict() const { return *static_cast<Dict*>(ptr_.get()); }
  std::shared_ptr<Callable> callable() const { return std::static_pointer_cast<Callable>(ptr_); }
  const std::string& undefined_what() const;  // "" for other types

  bool truthy() const;
  // Python's type name (str, int, dict, ...), for error messages.
  const char* type_name() const;
  // len() of a string (in code points), list or dict.
  std::optional<int64_t> length() const;

  // Python str(x) and repr(x); undefined renders as "".
  std::string str() const;
  std::string repr() const;
  void append_str(std::string& out) const;

  friend bool operator==(const Value& a, const Value& b);

  static Value from_json(const nlohmann::ordered_json& j);
  nlohmann::ordered_json to_json() const;  // throws RenderError for undefined/callables

 private:
  static Value from_json(const nlohmann::ordered_json& j, int depth);

  Type type_ = Type::Undefined;
  union {
    bool b_;
    int64_t i_ = 0;
    double f_;
  };
  // String (immutable once made), List, Dict or Callable; for undefined
  // values the string describing what was missing.
  std::shared_ptr<void> ptr_;
};

// An insertion-ordered str → Value map. Dicts from requests are small (a
// message has a handful of keys), so lookups scan.
class Dict {
 public:
  using Entry = std::pair<std::string, Value>;
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(std::string key, Value v);
  // For keys known to be new (a JSON object's): no scan, so a huge request
  // object converts in linear time.
  void append_new(std::string key, Value v);
  const std::vector<Entry>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }
  // namespace() objects: the only dicts whose attributes `set ns.x = ...` may assign.
  bool is_namespace = false;

 private:
  std::vector<Entry> entries_;
};

// Arguments of a call, positional then keyword, as the template wrote them.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The argument at `index` or named `name`, or nullptr.
  const Value* get(size_t index, std::string_view name) const;
  const Value* named(std::string_view name) const;  // keyword-only
};

class Interpreter;

// A function a template can call: a builtin global, a bound method, a macro.
struct Callable {
  virtual ~Callable() = default;
  virtual Value call(Interpreter& in, const CallArgs& args) = 0;
  virtual std::string name() const = 0;
};

// json.dumps with the arguments a template's tojson filter passes on.
struct JsonFormat {
  std::optional<std::string> indent;  // None: one line
  std::string item_separator = ", ";  // ", " one-line, "," indented (Python's defaults)
  std::string key_separator = ": ";
  bool ensure_ascii = false;
  bool sort_keys = false;
};
std::string json_dumps(const Value& v, const JsonFormat& format);

// Python float repr(): the shortest text that reads back as the same double.
std::string python_float_repr(double d);

}  // namespace shardlm::chat
