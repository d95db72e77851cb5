#include "chat/globals.h"

#include <fmt/format.h>

#include "chat/errors.h"

namespace shardlm::chat {

namespace {

template <class Fn>
struct Builtin : Callable {
  Builtin(const char* name, Fn fn) : name_(name), fn_(std::move(fn)) {}
  Value call(Interpreter& in, const CallArgs& args) override { return fn_(in, args); }
  std::string name() const override { return name_; }
  const char* name_;
  Fn fn_;
};

template <class Fn>
Value builtin(const char* name, Fn fn) {
  return Value(std::make_shared<Builtin<Fn>>(name, std::move(fn)));
}

int64_t int_arg(const Value& v, const char* what) {
  if (!v.is_int() && !v.is_bool())
    throw RenderError(fmt::format("{}: expected an integer, got {}", what, v.type_name()));
  return v.as_int();
}

Value range(const CallArgs& args) {
  if (args.positional.empty() || args.positional.size() > 3) throw RenderError("range() takes 1 to 3 arguments");
  int64_t start = 0, stop, step = 1;
  if (args.positional.size() == 1) {
    stop = int_arg(args.positional[0], "range()");
  } else {
    start = int_arg(args.positional[0], "range()");
    stop = int_arg(args.positional[1], "range()");
    if (args.positional.size() == 3) step = int_arg(args.positional[2], "range()");
  }
  if (step == 0) throw RenderError("range() step must not be zero");
  constexpr int64_t kMaxItems = 1 << 20;  // a template has no business with more
  List out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(out.size()) == kMaxItems) throw RenderError("range() too large");
    out.emplace_back(i);
  }
  return Value(std::move(out));
}

// namespace(...) and dict(...): a positional dict to copy, then keywords.
Value make_dict(const CallArgs& args, bool is_namespace, const char* what) {
  auto d = std::make_shared<Dict>();
  d->is_namespace = is_namespace;
  if (args.positional.size() > 1) throw RenderError(fmt::format("{} takes at most one positional argument", what));
  if (!args.positional.empty()) {
    const Value& init = args.positional[0];
    if (!init.is_dict()) throw RenderError(fmt::format("{}: positional argument must be a dict", what));
    for (const auto& [key, value] : init.dict().entries()) d->set(key, value);
  }
  for (const auto& [key, value] : args.keyword) d->set(key, value);
  return Value(std::move(d));
}

}  // namespace

void add_globals(Frame& frame) {
  frame.set("raise_exception", builtin("raise_exception", [](Interpreter&, const CallArgs& args) -> Value {
              const Value* message = args.get(0, "message");
              throw RaisedError(message ? message->str() : "raise_exception() called");
            }));
  frame.set("strftime_now", builtin("strftime_now", [](Interpreter& in, const CallArgs& args) {
              const Value* format = args.get(0, "format");
              if (!format || !format->is_string()) throw RenderError("strftime_now() needs a format string");
              return Value(in.strftime_now(format->as_string()));
            }));
  frame.set("namespace", builtin("namespace", [](Interpreter&, const CallArgs& args) {
              return make_dict(args, true, "namespace()");
            }));
  frame.set("dict", builtin("dict", [](Interpreter&, const CallArgs& args) { return make_dict(args, false, "dict()"); }));
  frame.set("range", builtin("range", [](Interpreter&, const CallArgs& args) { return range(args); }));
}

}  // namespace shardlm::chat
