#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <unordered_map>

#include "chat/builtins.h"
#include "chat/interpreter.h"
#include "chat/operators.h"

namespace shardlm::chat {

namespace {

using FilterFn = Value (*)(Interpreter&, const Value&, const CallArgs&);
using TestFn = bool (*)(const Value&, const CallArgs&);

const Value& arg(const CallArgs& args, size_t index, std::string_view name, const char* filter) {
  const Value* v = args.get(index, name);
  if (!v) throw RenderError(fmt::format("{}: missing argument '{}'", filter, name));
  return *v;
}

bool flag(const CallArgs& args, size_t index, std::string_view name) {
  const Value* v = args.get(index, name);
  return v && v->truthy();
}

// `attribute` may be dotted ("function.name"), as in jinja2's attrgetter.
Value lookup_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  for (;;) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool numeric = !part.empty() && part.size() <= 18 && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = get_item(v, numeric ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

// Hugging Face's tojson: json.dumps(x, ensure_ascii=False, indent=None,
// separators=None, sort_keys=False), in that positional order.
Value tojson(Interpreter&, const Value& v, const CallArgs& args) {
  JsonFormat f;
  f.ensure_ascii = flag(args, 0, "ensure_ascii");
  if (const Value* indent = args.get(1, "indent"); indent && !indent->is_none()) {
    if (indent->is_int()) f.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, indent->as_int())), ' ');
    else if (indent->is_string()) f.indent = indent->as_string();
    else throw RenderError("tojson: indent must be an integer or a string");
    f.item_separator = ",";
  }
  if (const Value* separators = args.get(2, "separators"); separators && !separators->is_none()) {
    if (!separators->is_list() || separators->list().size() != 2 || !separators->list()[0].is_string() ||
        !separators->list()[1].is_string())
      throw RenderError("tojson: separators must be a pair of strings");
    f.item_separator = separators->list()[0].as_string();
    f.key_separator = separators->list()[1].as_string();
  }
  f.sort_keys = flag(args, 3, "sort_keys");
  return Value(json_dumps(v, f));
}

Value join(Interpreter&, const Value& v, const CallArgs& args) {
  const Value* sep = args.get(0, "d");
  const Value* attribute = args.get(1, "attribute");
  std::string out;
  bool first = true;
  for (const Value& item : iteration_items(v, "join")) {
    if (!first && sep) sep->append_str(out);
    first = false;
    (attribute ? lookup_path(item, attribute->str()) : item).append_str(out);
  }
  return Value(std::move(out));
}

Value first(Interpreter&, const Value& v, const CallArgs&) {
  List items = iteration_items(v, "first");
  return items.empty() ? Value::undefined("no first item, sequence was empty") : items.front();
}

Value last(Interpreter&, const Value& v, const CallArgs&) {
  List items = iteration_items(v, "last");
  return items.empty() ? Value::undefined("no last item, sequence was empty") : items.back();
}

Value length(Interpreter&, const Value& v, const CallArgs&) {
  std::optional<int64_t> n = v.length();
  if (!n) throw RenderError(fmt::format("length: object of type '{}' has no len()", v.type_name()));
  return Value(*n);
}

Value default_value(Interpreter&, const Value& v, const CallArgs& args) {
  const Value* fallback = args.get(0, "default_value");
  bool boolean = flag(args, 1, "boolean");
  if (v.is_undefined() || (boolean && !v.truthy())) return fallback ? *fallback : Value("");
  return v;
}

Value items(Interpreter&, const Value& v, const CallArgs&) {
  if (v.is_undefined()) return Value(List{});
  if (!v.is_dict()) throw RenderError(fmt::format("items: can only get items from a mapping, not {}", v.type_name()));
  return *call_method(v, "items", {});
}

Value trim(Interpreter&, const Value& v, const CallArgs& args) {
  return Value(python_strip(v.str(), args.get(0, "chars"), StripSide::Both));
}

Value string_method_filter(const Value& v, std::string_view method, const CallArgs& args) {
  return *call_method(Value(v.str()), method, args);
}
Value lower(Interpreter&, const Value& v, const CallArgs& a) { return string_method_filter(v, "lower", a); }
Value upper(Interpreter&, const Value& v, const CallArgs& a) { return string_method_filter(v, "upper", a); }
Value title(Interpreter&, const Value& v, const CallArgs& a) { return string_method_filter(v, "title", a); }
Value capitalize(Interpreter&, const Value& v, const CallArgs& a) { return string_method_filter(v, "capitalize", a); }
Value replace(Interpreter&, const Value& v, const CallArgs& a) { return string_method_filter(v, "replace", a); }
Value string(Interpreter&, const Value& v, const CallArgs&) { return v.is_string() ? v : Value(v.str()); }
Value safe(Interpreter&, const Value& v, const CallArgs&) { return v; }

Value list(Interpreter&, const Value& v, const CallArgs&) { return Value(iteration_items(v, "list")); }

Value reverse(Interpreter&, const Value& v, const CallArgs&) {
  if (v.is_string()) {
    Value backwards(int64_t{-1});
    return get_slice(v, nullptr, nullptr, &backwards);
  }
  List items = iteration_items(v, "reverse");
  std::reverse(items.begin(), items.end());
  return Value(std::move(items));
}

Value indent(Interpreter&, const Value& v, const CallArgs& args) {
  const Value* width_arg = args.get(0, "width");
  std::string pad = !width_arg ? "    " : width_arg->is_string() ? width_arg->as_string()
                                                               : std::string(static_cast<size_t>(std::max<int64_t>(0, width_arg->as_int())), ' ');
  bool indent_first = flag(args, 1, "first");
  bool indent_blank = flag(args, 2, "blank");
  std::string s = v.str(), out;
  size_t start = 0;
  bool first_line = true;
  for (;;) {
    size_t nl = s.find('\n', start);
    std::string_view line(s.data() + start, (nl == std::string::npos ? s.size() : nl) - start);
    bool pad_it = first_line ? indent_first : (indent_blank || !line.empty());
    if (pad_it) out += pad;
    out += line;
    if (nl == std::string::npos) break;
    out += '\n';
    start = nl + 1;
    first_line = false;
  }
  return Value(std::move(out));
}

Value to_int(Interpreter&, const Value& v, const CallArgs& args) {
  const Value* fallback = args.get(0, "default");
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float() && std::isfinite(v.as_double())) return Value(static_cast<int64_t>(v.as_double()));
  if (v.is_string()) {
    std::string s = python_strip(v.as_string(), nullptr, StripSide::Both);
    try {
      size_t used = 0;
      long long n = std::stoll(s, &used, 10);
      if (used == s.size()) return Value(static_cast<int64_t>(n));
      double d = std::stod(s, &used);
      if (used == s.size() && std::isfinite(d)) return Value(static_cast<int64_t>(d));
    } catch (const std::exception&) {
    }
  }
  return fallback ? *fallback : Value(int64_t{0});
}

Value to_float(Interpreter&, const Value& v, const CallArgs& args) {
  const Value* fallback = args.get(0, "default");
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string()) {
    try {
      size_t used = 0;
      std::string s = python_strip(v.as_string(), nullptr, StripSide::Both);
      double d = std::stod(s, &used);
      if (used == s.size()) return Value(d);
    } catch (const std::exception&) {
    }
  }
  return fallback ? *fallback : Value(0.0);
}

Value abs_value(Interpreter&, const Value& v, const CallArgs&) {
  if (v.is_float()) return Value(std::fabs(v.as_double()));
  if (v.is_int() || v.is_bool()) return unary_arithmetic(v.as_int() < 0 ? "-" : "+", v);
  throw RenderError(fmt::format("abs: bad operand type '{}'", v.type_name()));
}

Value round_value(Interpreter&, const Value& v, const CallArgs& args) {
  if (!v.is_number()) throw RenderError(fmt::format("round: bad operand type '{}'", v.type_name()));
  const Value* precision_arg = args.get(0, "precision");
  int64_t precision = precision_arg ? precision_arg->as_int() : 0;
  std::string method = args.get(1, "method") ? args.get(1, "method")->str() : "common";
  double scale = std::pow(10.0, static_cast<double>(precision)), x = v.as_double() * scale;
  double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::nearbyint(x);  // Python rounds halves to even
  return Value(r / scale);
}

// select/reject/selectattr/rejectattr: keep items whose test (or truth) matches.
Value filter_items(const Value& v, const CallArgs& args, bool by_attribute, bool keep, const char* name) {
  size_t next = 0;
  std::string attribute;
  if (by_attribute) attribute = arg(args, next++, "attribute", name).str();
  std::string test;
  if (next < args.positional.size()) test = args.positional[next++].str();
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(std::min(next, args.positional.size())),
                              args.positional.end());
  if (!test.empty() && !has_test(test)) throw RenderError(fmt::format("{}: no test named '{}'", name, test));
  List out;
  for (const Value& item : iteration_items(v, name)) {
    Value subject = by_attribute ? lookup_path(item, attribute) : item;
    bool passed = test.empty() ? subject.truthy() : apply_test(test, subject, test_args);
    if (passed == keep) out.push_back(item);
  }
  return Value(std::move(out));
}
Value select(Interpreter&, const Value& v, const CallArgs& a) { return filter_items(v, a, false, true, "select"); }
Value reject(Interpreter&, const Value& v, const CallArgs& a) { return filter_items(v, a, false, false, "reject"); }
Value selectattr(Interpreter&, const Value& v, const CallArgs& a) { return filter_items(v, a, true, true, "selectattr"); }
Value rejectattr(Interpreter&, const Value& v, const CallArgs& a) { return filter_items(v, a, true, false, "rejectattr"); }

Value map(Interpreter& in, const Value& v, const CallArgs& args) {
  List out;
  if (const Value* attribute = args.named("attribute")) {
    const Value* fallback = args.named("default");
    for (const Value& item : iteration_items(v, "map")) {
      Value found = lookup_path(item, attribute->str());
      out.push_back(found.is_undefined() && fallback ? *fallback : found);
    }
    return Value(std::move(out));
  }
  if (args.positional.empty()) throw RenderError("map: needs a filter name or attribute=");
  std::string filter = args.positional[0].str();
  if (!has_filter(filter)) throw RenderError(fmt::format("map: no filter named '{}'", filter));
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : iteration_items(v, "map")) out.push_back(apply_filter(in, filter, item, rest));
  return Value(std::move(out));
}

Value unique(Interpreter&, const Value& v, const CallArgs&) {
  List out;
  for (const Value& item : iteration_items(v, "unique"))
    if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
  return Value(std::move(out));
}

Value sort(Interpreter&, const Value& v, const CallArgs& args) {
  bool reverse_order = flag(args, 0, "reverse");
  const Value* attribute = args.get(2, "attribute");
  List items = iteration_items(v, "sort");
  auto key = [&](const Value& item) { return attribute ? lookup_path(item, attribute->str()) : item; };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    return reverse_order ? less_than(key(b), key(a)) : less_than(key(a), key(b));
  });
  return Value(std::move(items));
}

Value dictsort(Interpreter&, const Value& v, const CallArgs& args) {
  if (!v.is_dict()) throw RenderError("dictsort: needs a dict");
  bool by_value = args.get(1, "by") && args.get(1, "by")->str() == "value";
  bool reverse_order = flag(args, 2, "reverse");
  List pairs = call_method(v, "items", {})->list();
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& a, const Value& b) {
    const Value &x = a.list()[by_value ? 1 : 0], &y = b.list()[by_value ? 1 : 0];
    return reverse_order ? less_than(y, x) : less_than(x, y);
  });
  return Value(std::move(pairs));
}

const std::unordered_map<std::string_view, FilterFn>& filters() {
  static const std::unordered_map<std::string_view, FilterFn> table = {
      {"tojson", tojson}, {"join", join}, {"first", first}, {"last", last}, {"length", length}, {"count", length},
      {"default", default_value}, {"d", default_value}, {"items", items}, {"trim", trim}, {"lower", lower},
      {"upper", upper}, {"title", title}, {"capitalize", capitalize}, {"replace", replace}, {"string", string},
      {"safe", safe}, {"list", list}, {"reverse", reverse}, {"indent", indent}, {"int", to_int}, {"float", to_float},
      {"abs", abs_value}, {"round", round_value}, {"select", select}, {"reject", reject}, {"selectattr", selectattr},
      {"rejectattr", rejectattr}, {"map", map}, {"unique", unique}, {"sort", sort}, {"dictsort", dictsort},
  };
  return table;
}

// ---- tests ----

bool test_defined(const Value& v, const CallArgs&) { return !v.is_undefined(); }
bool test_undefined(const Value& v, const CallArgs&) { return v.is_undefined(); }
bool test_none(const Value& v, const CallArgs&) { return v.is_none(); }
bool test_boolean(const Value& v, const CallArgs&) { return v.is_bool(); }
bool test_true(const Value& v, const CallArgs&) { return v.is_bool() && v.as_bool(); }
bool test_false(const Value& v, const CallArgs&) { return v.is_bool() && !v.as_bool(); }
bool test_integer(const Value& v, const CallArgs&) { return v.is_int(); }
bool test_float(const Value& v, const CallArgs&) { return v.is_float(); }
bool test_number(const Value& v, const CallArgs&) { return v.is_number(); }
bool test_string(const Value& v, const CallArgs&) { return v.is_string(); }
bool test_mapping(const Value& v, const CallArgs&) { return v.is_dict() && !v.dict().is_namespace; }
bool test_iterable(const Value& v, const CallArgs&) {
  return v.is_list() || v.is_string() || test_mapping(v, {}) || v.is_undefined();
}
bool test_sequence(const Value& v, const CallArgs& a) { return test_iterable(v, a); }
bool test_callable(const Value& v, const CallArgs&) { return v.is_callable(); }
bool test_lower(const Value& v, const CallArgs&) {
  return v.is_string() && v.as_string() == call_method(v, "lower", {})->as_string();
}
bool test_upper(const Value& v, const CallArgs&) {
  return v.is_string() && v.as_string() == call_method(v, "upper", {})->as_string();
}
bool test_eq(const Value& v, const CallArgs& a) { return v == arg(a, 0, "other", "equalto"); }
bool test_ne(const Value& v, const CallArgs& a) { return !(v == arg(a, 0, "other", "ne")); }
bool test_lt(const Value& v, const CallArgs& a) { return less_than(v, arg(a, 0, "other", "lt")); }
bool test_le(const Value& v, const CallArgs& a) { return !less_than(arg(a, 0, "other", "le"), v); }
bool test_gt(const Value& v, const CallArgs& a) { return less_than(arg(a, 0, "other", "gt"), v); }
bool test_ge(const Value& v, const CallArgs& a) { return !less_than(v, arg(a, 0, "other", "ge")); }
bool test_in(const Value& v, const CallArgs& a) { return contains(arg(a, 0, "seq", "in"), v); }
bool test_sameas(const Value& v, const CallArgs& a) {
  const Value& other = arg(a, 0, "other", "sameas");
  if (v.type() != other.type()) return false;
  if (v.is_list()) return &v.list() == &other.list();
  if (v.is_dict()) return &v.dict() == &other.dict();
  return v == other;
}
int64_t int_operand(const Value& v, const char* test) {
  if (!v.is_int() && !v.is_bool()) throw RenderError(fmt::format("{}: needs an integer, got {}", test, v.type_name()));
  return v.as_int();
}
bool test_odd(const Value& v, const CallArgs&) { return int_operand(v, "odd") % 2 != 0; }
bool test_even(const Value& v, const CallArgs&) { return int_operand(v, "even") % 2 == 0; }
bool test_divisibleby(const Value& v, const CallArgs& a) {
  int64_t d = int_operand(arg(a, 0, "num", "divisibleby"), "divisibleby");
  if (d == 0) throw RenderError("divisibleby: division by zero");
  return int_operand(v, "divisibleby") % d == 0;
}

const std::unordered_map<std::string_view, TestFn>& tests() {
  static const std::unordered_map<std::string_view, TestFn> table = {
      {"defined", test_defined}, {"undefined", test_undefined}, {"none", test_none}, {"boolean", test_boolean},
      {"true", test_true}, {"false", test_false}, {"integer", test_integer}, {"float", test_float},
      {"number", test_number}, {"string", test_string}, {"mapping", test_mapping}, {"iterable", test_iterable},
      {"sequence", test_sequence}, {"callable", test_callable}, {"lower", test_lower}, {"upper", test_upper},
      {"equalto", test_eq}, {"eq", test_eq}, {"==", test_eq}, {"ne", test_ne}, {"!=", test_ne}, {"lt", test_lt},
      {"<", test_lt}, {"le", test_le}, {"<=", test_le}, {"gt", test_gt}, {">", test_gt}, {"ge", test_ge},
      {">=", test_ge}, {"in", test_in}, {"sameas", test_sameas}, {"odd", test_odd}, {"even", test_even},
      {"divisibleby", test_divisibleby},
  };
  return table;
}

}  // namespace

List iteration_items(const Value& v, std::string_view what) {
  switch (v.type()) {
    case Value::Type::Undefined: return {};
    case Value::Type::List: return v.list();
    case Value::Type::Dict: {
      List keys;
      for (const auto& entry : v.dict().entries()) keys.emplace_back(entry.first);
      return keys;
    }
    case Value::Type::String: {
      List chars;
      const std::string& s = v.as_string();
      for (size_t i = 0; i < s.size();) {
        size_t j = i + 1;
        while (j < s.size() && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) ++j;
        chars.emplace_back(s.substr(i, j - i));
        i = j;
      }
      return chars;
    }
    default:
      throw RenderError(fmt::format("{}{}'{}' object is not iterable", what, what.empty() ? "" : ": ", v.type_name()));
  }
}

bool has_filter(std::string_view name) { return filters().count(name) != 0; }
bool has_test(std::string_view name) { return tests().count(name) != 0; }

Value apply_filter(Interpreter& in, std::string_view name, const Value& input, const CallArgs& args) {
  return filters().at(name)(in, input, args);
}

bool apply_test(std::string_view name, const Value& value, const CallArgs& args) {
  return tests().at(name)(value, args);
}

}  // namespace shardlm::chat
