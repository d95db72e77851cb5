#include <algorithm>
#include <cctype>
#include <fmt/format.h>

#include "chat/builtins.h"

namespace shardlm::chat {

namespace {

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

// Byte offsets where each code point of s starts, plus s.size() at the end.
std::vector<size_t> code_point_starts(std::string_view s) {
  std::vector<size_t> starts;
  for (size_t i = 0; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) starts.push_back(i);
  starts.push_back(s.size());
  return starts;
}

// The code points of s as separate strings.
std::vector<std::string_view> code_points(std::string_view s) {
  std::vector<size_t> starts = code_point_starts(s);
  std::vector<std::string_view> out;
  for (size_t k = 0; k + 1 < starts.size(); ++k) out.push_back(s.substr(starts[k], starts[k + 1] - starts[k]));
  return out;
}

bool is_python_space(std::string_view cp) {
  if (cp.size() == 1) {
    char c = cp[0];
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || (c >= 0x1C && c <= 0x1F);
  }
  // The non-ASCII code points Python's str.isspace() accepts.
  static const char* const kSpaces[] = {"\xC2\x85", "\xC2\xA0", "\xE1\x9A\x80", "\xE2\x80\x80", "\xE2\x80\x81",
                                        "\xE2\x80\x82", "\xE2\x80\x83", "\xE2\x80\x84", "\xE2\x80\x85", "\xE2\x80\x86",
                                        "\xE2\x80\x87", "\xE2\x80\x88", "\xE2\x80\x89", "\xE2\x80\x8A", "\xE2\x80\xA8",
                                        "\xE2\x80\xA9", "\xE2\x80\xAF", "\xE2\x81\x9F", "\xE3\x80\x80"};
  return std::any_of(std::begin(kSpaces), std::end(kSpaces), [&](const char* s) { return cp == s; });
}

const std::string& need_string(const Value* v, const char* what) {
  if (!v || !v->is_string()) throw RenderError(fmt::format("{} must be a string", what));
  return v->as_string();
}

int64_t need_int(const Value* v, const char* what) {
  if (!v || !(v->is_int() || v->is_bool())) throw RenderError(fmt::format("{} must be an integer", what));
  return v->as_int();
}

Value str_split(const std::string& s, const CallArgs& args) {
  const Value* sep = args.get(0, "sep");
  const Value* max_arg = args.get(1, "maxsplit");
  int64_t max_split = max_arg ? need_int(max_arg, "split(): maxsplit") : -1;
  List parts;
  if (!sep || sep->is_none()) {  // runs of whitespace, no empty parts
    std::vector<std::string_view> cps = code_points(s);
    size_t k = 0;
    while (k < cps.size()) {
      while (k < cps.size() && is_python_space(cps[k])) ++k;
      if (k == cps.size()) break;
      if (max_split >= 0 && static_cast<int64_t>(parts.size()) == max_split) {
        size_t offset = static_cast<size_t>(cps[k].data() - s.data());
        std::string rest = s.substr(offset);
        rest.erase(rest.find_last_not_of(" \t\n\r\f\v") + 1);
        parts.emplace_back(std::move(rest));
        break;
      }
      std::string word;
      while (k < cps.size() && !is_python_space(cps[k])) word += cps[k++];
      parts.emplace_back(std::move(word));
    }
    return Value(std::move(parts));
  }
  const std::string& separator = need_string(sep, "split(): separator");
  if (separator.empty()) throw RenderError("split(): empty separator");
  size_t start = 0;
  for (;;) {
    size_t at = s.find(separator, start);
    if (at == std::string::npos || (max_split >= 0 && static_cast<int64_t>(parts.size()) == max_split)) break;
    parts.emplace_back(s.substr(start, at - start));
    start = at + separator.size();
  }
  parts.emplace_back(s.substr(start));
  return Value(std::move(parts));
}

std::string str_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between every code point
    std::vector<std::string_view> cps = code_points(s);
    int64_t done = 0;
    for (std::string_view cp : cps) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      out += cp;
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  for (;;) {
    size_t at = s.find(from, start);
    if (at == std::string::npos || (count >= 0 && done == count)) break;
    out.append(s, start, at - start);
    out += to;
    start = at + from.size();
    ++done;
  }
  out.append(s, start);
  return out;
}

bool matches_affix(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& a) {
    const std::string& x = need_string(&a, prefix ? "startswith()" : "endswith()");
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_list()) return std::any_of(affix.list().begin(), affix.list().end(), one);
  return one(affix);
}

std::string ascii_case(std::string s, int (*convert)(int)) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x80) c = static_cast<char>(convert(static_cast<unsigned char>(c)));
  return s;
}

std::string title_case(const std::string& s) {
  std::string out = s;
  bool after_letter = false;
  for (char& c : out) {
    unsigned char u = static_cast<unsigned char>(c);
    bool letter = std::isalpha(u) || u >= 0x80;
    if (u < 0x80 && std::isalpha(u)) c = static_cast<char>(after_letter ? std::tolower(u) : std::toupper(u));
    after_letter = letter;
  }
  return out;
}

std::optional<Value> str_method(const std::string& s, std::string_view name, const CallArgs& args) {
  if (name == "startswith" || name == "endswith") {
    const Value* affix = args.get(0, "prefix");
    if (!affix) throw RenderError(fmt::format("{}() takes at least 1 argument", name));
    return Value(matches_affix(s, *affix, name == "startswith"));
  }
  if (name == "strip") return Value(python_strip(s, args.get(0, "chars"), StripSide::Both));
  if (name == "lstrip") return Value(python_strip(s, args.get(0, "chars"), StripSide::Left));
  if (name == "rstrip") return Value(python_strip(s, args.get(0, "chars"), StripSide::Right));
  if (name == "split") return str_split(s, args);
  if (name == "replace") {
    const Value* count = args.get(2, "count");
    return Value(str_replace(s, need_string(args.get(0, "old"), "replace(): old"),
                             need_string(args.get(1, "new"), "replace(): new"), count ? need_int(count, "replace(): count") : -1));
  }
  if (name == "upper") return Value(ascii_case(s, ::toupper));
  if (name == "lower") return Value(ascii_case(s, ::tolower));
  if (name == "title") return Value(title_case(s));
  if (name == "capitalize") {
    std::string out = ascii_case(s, ::tolower);
    if (!out.empty() && static_cast<unsigned char>(out[0]) < 0x80) out[0] = static_cast<char>(std::toupper(out[0]));
    return Value(std::move(out));
  }
  if (name == "find") {
    size_t at = s.find(need_string(args.get(0, "sub"), "find()"));
    if (at == std::string::npos) return Value(int64_t{-1});
    return Value(static_cast<int64_t>(code_point_starts(s.substr(0, at)).size() - 1));
  }
  if (name == "count") {
    const std::string& sub = need_string(args.get(0, "sub"), "count()");
    if (sub.empty()) return Value(*Value(s).length() + 1);
    int64_t n = 0;
    for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
    return Value(n);
  }
  if (name == "join") {
    const Value* items = args.get(0, "iterable");
    if (!items || !items->is_list()) throw RenderError("join() needs a list");
    std::string out;
    bool first = true;
    for (const Value& item : items->list()) {
      if (!first) out += s;
      first = false;
      out += need_string(&item, "join(): each item");
    }
    return Value(std::move(out));
  }
  return std::nullopt;
}

Value pairs_of(const Dict& d) {
  List pairs;
  pairs.reserve(d.size());
  for (const auto& [key, value] : d.entries()) pairs.emplace_back(List{Value(key), value});
  return Value(std::move(pairs));
}

std::optional<Value> dict_method(Dict& d, std::string_view name, const CallArgs& args) {
  if (name == "get") {
    const Value* key = args.get(0, "key");
    if (!key) throw RenderError("get() takes at least 1 argument");
    const Value* fallback = args.get(1, "default");
    const Value* found = key->is_string() ? d.find(key->as_string()) : nullptr;
    if (found) return *found;
    return fallback ? *fallback : Value::none();
  }
  if (name == "items") return pairs_of(d);
  if (name == "keys" || name == "values") {
    List out;
    for (const auto& [key, value] : d.entries()) out.push_back(name == "keys" ? Value(key) : value);
    return Value(std::move(out));
  }
  return std::nullopt;
}

// append and pop mutate: jinja2's immutable sandbox (which Hugging Face uses)
// refuses them, but templates such as Kimi-K2's need them for tool calls.
std::optional<Value> list_method(List& l, std::string_view name, const CallArgs& args) {
  if (name == "append") {
    const Value* item = args.get(0, "object");
    if (!item) throw RenderError("append() takes exactly one argument");
    l.push_back(*item);
    return Value::none();
  }
  if (name == "pop") {
    if (l.empty()) throw RenderError("pop from empty list");
    const Value* index_arg = args.get(0, "index");
    int64_t index = index_arg ? need_int(index_arg, "pop(): index") : -1;
    int64_t n = static_cast<int64_t>(l.size());
    if (index < 0) index += n;
    if (index < 0 || index >= n) throw RenderError("pop index out of range");
    Value out = std::move(l[static_cast<size_t>(index)]);
    l.erase(l.begin() + index);
    return out;
  }
  return std::nullopt;
}

bool is_method_name(const Value& obj, std::string_view name) {
  static const std::string_view kStr[] = {"startswith", "endswith", "strip", "lstrip", "rstrip", "split", "replace",
                                          "upper", "lower", "title", "capitalize", "find", "count", "join"};
  static const std::string_view kDict[] = {"get", "items", "keys", "values"};
  static const std::string_view kList[] = {"append", "pop"};
  auto in = [&](const auto& names) { return std::find(std::begin(names), std::end(names), name) != std::end(names); };
  if (obj.is_string()) return in(kStr);
  if (obj.is_dict()) return !obj.dict().is_namespace && in(kDict);
  if (obj.is_list()) return in(kList);
  return false;
}

struct BoundMethod : Callable {
  BoundMethod(Value receiver, std::string method) : receiver(std::move(receiver)), method(std::move(method)) {}
  Value call(Interpreter&, const CallArgs& args) override { return *call_method(receiver, method, args); }
  std::string name() const override { return std::string(receiver.type_name()) + "." + method; }
  Value receiver;
  std::string method;
};

Value missing(const Value& obj, const std::string& what) {
  std::string message = "'";
  message.append(obj.type_name()).append(" object' has no attribute '").append(what).append("'");
  return Value::undefined(std::move(message));
}

}  // namespace

void fail_undefined(const Value& v) {
  const std::string& what = v.undefined_what();
  throw RenderError(what.empty() ? "value is undefined" : what);
}

std::string python_strip(std::string_view s, const Value* chars, StripSide side) {
  auto strip_with = [&](auto&& is_stripped) {
    std::vector<size_t> starts = code_point_starts(s);
    size_t first = 0, last = starts.size() - 1;  // code point range [first, last)
    auto cp = [&](size_t k) { return s.substr(starts[k], starts[k + 1] - starts[k]); };
    if (side != StripSide::Right)
      while (first < last && is_stripped(cp(first))) ++first;
    if (side != StripSide::Left)
      while (last > first && is_stripped(cp(last - 1))) --last;
    return std::string(s.substr(starts[first], starts[last] - starts[first]));
  };
  if (!chars || chars->is_none()) return strip_with(is_python_space);
  const std::string& set = need_string(chars, "strip(): chars");
  std::vector<std::string_view> stripped = code_points(set);
  return strip_with([&](std::string_view cp) { return std::find(stripped.begin(), stripped.end(), cp) != stripped.end(); });
}

Value get_attribute(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict()) {
    if (is_method_name(obj, name)) return Value(std::make_shared<BoundMethod>(obj, name));
    if (const Value* v = obj.dict().find(name)) return *v;
    return missing(obj, name);
  }
  if (is_method_name(obj, name)) return Value(std::make_shared<BoundMethod>(obj, name));
  return missing(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict() && key.is_string()) {
    if (const Value* v = obj.dict().find(key.as_string())) return *v;
    return get_attribute(obj, key.as_string());
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t index = key.as_int();
    if (obj.is_list()) {
      int64_t n = static_cast<int64_t>(obj.list().size());
      if (index < 0) index += n;
      if (index < 0 || index >= n) return Value::undefined(fmt::format("list index {} out of range", key.as_int()));
      return obj.list()[static_cast<size_t>(index)];
    }
    const std::string& s = obj.as_string();
    if (is_ascii(s)) {
      int64_t n = static_cast<int64_t>(s.size());
      if (index < 0) index += n;
      if (index < 0 || index >= n) return Value::undefined("string index out of range");
      return Value(std::string(1, s[static_cast<size_t>(index)]));
    }
    std::vector<std::string_view> cps = code_points(s);
    int64_t n = static_cast<int64_t>(cps.size());
    if (index < 0) index += n;
    if (index < 0 || index >= n) return Value::undefined("string index out of range");
    return Value(cps[static_cast<size_t>(index)]);
  }
  if (key.is_string()) return get_attribute(obj, key.as_string());
  std::string message = "'";
  message.append(obj.type_name()).append(" object' has no element ").append(key.repr());
  return Value::undefined(std::move(message));
}

Value get_slice(const Value& obj, const Value* start_arg, const Value* stop_arg, const Value* step_arg) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (!obj.is_list() && !obj.is_string()) throw RenderError(fmt::format("cannot slice a {}", obj.type_name()));
  auto bound = [](const Value* v, const char* what) -> std::optional<int64_t> {
    if (!v || v->is_none()) return std::nullopt;
    return need_int(v, what);
  };
  int64_t step = bound(step_arg, "slice step").value_or(1);
  if (step == 0) throw RenderError("slice step cannot be zero");
  std::vector<std::string_view> cps;
  bool ascii = obj.is_string() && is_ascii(obj.as_string());
  if (obj.is_string() && !ascii) cps = code_points(obj.as_string());
  int64_t n = obj.is_list() ? static_cast<int64_t>(obj.list().size())
              : ascii       ? static_cast<int64_t>(obj.as_string().size())
                            : static_cast<int64_t>(cps.size());
  // Python's slice index adjustment.
  auto adjust = [&](std::optional<int64_t> v, int64_t if_missing) {
    if (!v) return if_missing;
    int64_t i = *v;
    if (i < 0) {
      i += n;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= n) {
      i = step < 0 ? n - 1 : n;
    }
    return i;
  };
  int64_t start = adjust(bound(start_arg, "slice start"), step < 0 ? n - 1 : 0);
  int64_t stop = adjust(bound(stop_arg, "slice stop"), step < 0 ? -1 : n);
  if (obj.is_list()) {
    List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(obj.list()[static_cast<size_t>(i)]);
    return Value(std::move(out));
  }
  std::string out;
  const std::string& s = obj.as_string();
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (ascii) out += s[static_cast<size_t>(i)];
    else out += cps[static_cast<size_t>(i)];
  }
  return Value(std::move(out));
}

std::optional<Value> call_method(const Value& obj, std::string_view name, const CallArgs& args) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_string()) return str_method(obj.as_string(), name, args);
  if (obj.is_dict() && !obj.dict().is_namespace) return dict_method(obj.dict(), name, args);
  if (obj.is_list()) return list_method(obj.list(), name, args);
  return std::nullopt;
}

}  // namespace shardlm::chat
