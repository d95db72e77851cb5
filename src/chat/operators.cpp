#include "chat/operators.h"

#include <cmath>
#include <fmt/format.h>

#include "chat/builtins.h"

namespace shardlm::chat {

namespace {

[[noreturn]] void unsupported(std::string_view op, const Value& a, const Value& b) {
  throw RenderError(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name()));
}

template <class Op>
int64_t checked(Op op, int64_t x, int64_t y) {
  int64_t r = 0;
  if (op(x, y, &r)) throw RenderError("integer overflow");
  return r;
}
bool add(int64_t x, int64_t y, int64_t* r) { return __builtin_add_overflow(x, y, r); }
bool sub(int64_t x, int64_t y, int64_t* r) { return __builtin_sub_overflow(x, y, r); }
bool mul(int64_t x, int64_t y, int64_t* r) { return __builtin_mul_overflow(x, y, r); }

Value repeat(const Value& seq, int64_t times) {
  if (times < 0) times = 0;
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (static_cast<uint64_t>(times) * s.size() > (64u << 20)) throw RenderError("string repetition too large");
    std::string out;
    for (int64_t k = 0; k < times; ++k) out += s;
    return Value(std::move(out));
  }
  if (static_cast<uint64_t>(times) * seq.list().size() > (1u << 20)) throw RenderError("list repetition too large");
  List out;
  for (int64_t k = 0; k < times; ++k) out.insert(out.end(), seq.list().begin(), seq.list().end());
  return Value(std::move(out));
}

Value arithmetic(std::string_view op, const Value& a, const Value& b) {
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
    if (a.is_list() && b.is_list()) {
      List out = a.list();
      out.insert(out.end(), b.list().begin(), b.list().end());
      return Value(std::move(out));
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int());
  }
  if (!a.is_number() || !b.is_number()) unsupported(op, a, b);
  bool integers = !a.is_float() && !b.is_float();
  if (op == "/") {
    if (b.as_double() == 0.0) throw RenderError("division by zero");
    return Value(a.as_double() / b.as_double());
  }
  if (integers) {
    int64_t x = a.as_int(), y = b.as_int();
    if (op == "+") return Value(checked(add, x, y));
    if (op == "-") return Value(checked(sub, x, y));
    if (op == "*") return Value(checked(mul, x, y));
    if (op == "//" || op == "%") {
      if (y == 0) throw RenderError("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) throw RenderError("integer overflow");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {  // Python floors toward negative infinity
        --q;
        m += y;
      }
      return Value(op == "//" ? q : m);
    }
    if (op == "**") {
      if (y < 0) return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
      int64_t result = 1, base = x;
      for (int64_t e = y; e > 0; e >>= 1) {  // square-and-multiply
        if (e & 1) result = checked(mul, result, base);
        if (e > 1) base = checked(mul, base, base);
      }
      return Value(result);
    }
  }
  double x = a.as_double(), y = b.as_double();
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (op == "//" || op == "%") {
    if (y == 0.0) throw RenderError("float division or modulo by zero");
    double m = std::fmod(x, y);
    if (m != 0.0 && ((m < 0) != (y < 0))) m += y;
    return Value(op == "//" ? std::floor((x - m) / y + 0.5) : m);
  }
  if (op == "**") return Value(std::pow(x, y));
  unsupported(op, a, b);
}

}  // namespace

bool contains(const Value& haystack, const Value& needle) {
  switch (haystack.type()) {
    case Value::Type::String:
      if (!needle.is_string())
        throw RenderError(fmt::format("'in <string>' requires string as left operand, not {}", needle.type_name()));
      return haystack.as_string().find(needle.as_string()) != std::string::npos;
    case Value::Type::List:
      for (const Value& item : haystack.list())
        if (item == needle) return true;
      return false;
    case Value::Type::Dict: return needle.is_string() && haystack.dict().find(needle.as_string()) != nullptr;
    case Value::Type::Undefined: return false;  // iterates as empty
    default: throw RenderError(fmt::format("argument of type '{}' is not iterable", haystack.type_name()));
  }
}

bool less_than(const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 order is code point order
  if (a.is_list() && b.is_list()) {
    const List &x = a.list(), &y = b.list();
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (x[k] == y[k]) continue;
      return less_than(x[k], y[k]);
    }
    return x.size() < y.size();
  }
  throw RenderError(fmt::format("'<' not supported between instances of '{}' and '{}'", a.type_name(), b.type_name()));
}

Value binary_operation(std::string_view op, const Value& left, const Value& right) {
  if (op == "~") {
    std::string out;
    left.append_str(out);
    right.append_str(out);
    return Value(std::move(out));
  }
  if (op == "==") return Value(left == right);
  if (op == "!=") return Value(!(left == right));
  if (op == "<") return Value(less_than(left, right));
  if (op == ">") return Value(less_than(right, left));
  if (op == "<=") return Value(!less_than(right, left));
  if (op == ">=") return Value(!less_than(left, right));
  if (op == "in") return Value(contains(right, left));
  if (op == "not in") return Value(!contains(right, left));
  if (left.is_undefined()) fail_undefined(left);
  if (right.is_undefined()) fail_undefined(right);
  return arithmetic(op, left, right);
}

Value unary_arithmetic(std::string_view op, const Value& v) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number()) throw RenderError(fmt::format("bad operand type for unary {}: '{}'", op, v.type_name()));
  if (op == "+") return v.is_float() ? v : Value(v.as_int());
  if (v.is_float()) return Value(-v.as_double());
  if (v.as_int() == INT64_MIN) throw RenderError("integer overflow");
  return Value(-v.as_int());
}

}  // namespace shardlm::chat
