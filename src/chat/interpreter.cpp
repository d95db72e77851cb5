#include "chat/interpreter.h"

#include <algorithm>
#include <fmt/format.h>

#include "chat/builtins.h"
#include "chat/globals.h"
#include "chat/operators.h"

namespace shardlm::chat {

namespace {

constexpr int kMaxCallDepth = 100;

// A macro as a value: calling it renders its body. It refers to its defining
// frame weakly, because that frame holds the macro (a strong reference would
// be a cycle).
struct Macro : Callable {
  Macro(const Stmt& stmt, std::weak_ptr<Frame> closure) : stmt(stmt), closure(std::move(closure)) {}
  Value call(Interpreter& in, const CallArgs& args) override {
    std::shared_ptr<Frame> frame = closure.lock();
    if (!frame) throw RenderError(fmt::format("macro '{}' called after its scope ended", stmt.name));
    return Value(in.call_macro(stmt, frame, args));
  }
  std::string name() const override { return stmt.name; }
  const Stmt& stmt;
  std::weak_ptr<Frame> closure;
};

Value loop_info(size_t index, size_t length, const List& items) {
  auto info = std::make_shared<Dict>();
  auto n = static_cast<int64_t>(length), i = static_cast<int64_t>(index);
  info->set("index0", Value(i));
  info->set("index", Value(i + 1));
  info->set("revindex0", Value(n - i - 1));
  info->set("revindex", Value(n - i));
  info->set("first", Value(index == 0));
  info->set("last", Value(index + 1 == length));
  info->set("length", Value(n));
  info->set("previtem", index > 0 ? items[index - 1] : Value::undefined("there is no previous item"));
  info->set("nextitem", index + 1 < length ? items[index + 1] : Value::undefined("there is no next item"));
  return Value(std::move(info));
}

void assign_targets(Frame& frame, const std::vector<std::string>& targets, const Value& v) {
  if (targets.size() == 1) {
    frame.set(targets[0], v);
    return;
  }
  if (!v.is_list() || v.list().size() != targets.size())
    throw RenderError(fmt::format("cannot unpack {} into {} names", v.type_name(), targets.size()));
  for (size_t k = 0; k < targets.size(); ++k) frame.set(targets[k], v.list()[k]);
}

}  // namespace

const Value* Frame::find(const std::string& name) const {
  for (const Frame* f = this; f; f = f->parent_.get())
    for (const auto& [key, value] : f->vars_)
      if (key == name) return &value;
  return nullptr;
}

void Frame::set(const std::string& name, Value v) {
  for (auto& [key, value] : vars_) {
    if (key == name) {
      value = std::move(v);
      return;
    }
  }
  vars_.emplace_back(name, std::move(v));
}

std::string Interpreter::render(const Body& body, const Value& context) {
  auto globals = std::make_shared<Frame>(nullptr);
  add_globals(*globals);
  auto context_frame = std::make_shared<Frame>(globals);
  if (context.is_dict())
    for (const auto& [key, value] : context.dict().entries()) context_frame->set(key, value);
  auto top = std::make_shared<Frame>(context_frame);
  std::string out;
  exec(body, top, out);
  return out;
}

Interpreter::Flow Interpreter::exec(const Body& body, const std::shared_ptr<Frame>& frame, std::string& out) {
  for (const StmtPtr& sp : body) {
    const Stmt& s = *sp;
    line_ = s.line;
    switch (s.kind) {
      case Stmt::Kind::Text: out += s.text; break;
      case Stmt::Kind::Output: eval(*s.expr, frame).append_str(out); break;
      case Stmt::Kind::If: {
        const Body* chosen = &s.else_body;
        for (const auto& [condition, branch] : s.branches) {
          if (eval(*condition, frame).truthy()) {
            chosen = &branch;
            break;
          }
        }
        Flow flow = exec(*chosen, frame, out);
        if (flow != Flow::Normal) return flow;
        break;
      }
      case Stmt::Kind::For: exec_for(s, frame, out); break;
      case Stmt::Kind::Set: exec_set(s, frame); break;
      case Stmt::Kind::Macro:
        frame->set(s.name, Value(std::make_shared<Macro>(s, std::weak_ptr<Frame>(frame))));
        break;
      case Stmt::Kind::Break: return Flow::Break;
      case Stmt::Kind::Continue: return Flow::Continue;
      case Stmt::Kind::Block: {
        Flow flow = exec(s.body, frame, out);
        if (flow != Flow::Normal) return flow;
        break;
      }
    }
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s, const std::shared_ptr<Frame>& frame, std::string& out) {
  List items = iteration_items(eval(*s.expr, frame), {});
  if (s.condition) {  // the loop filter runs before `loop` exists, as in jinja2
    List kept;
    for (Value& item : items) {
      auto scope = std::make_shared<Frame>(frame);
      assign_targets(*scope, s.targets, item);
      if (eval(*s.condition, scope).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) return exec(s.else_body, frame, out);
  for (size_t k = 0; k < items.size(); ++k) {
    auto scope = std::make_shared<Frame>(frame);
    assign_targets(*scope, s.targets, items[k]);
    scope->set("loop", loop_info(k, items.size(), items));
    if (exec(s.body, scope, out) == Flow::Break) break;
  }
  return Flow::Normal;
}

void Interpreter::exec_set(const Stmt& s, const std::shared_ptr<Frame>& frame) {
  Value v;
  if (s.expr) {
    v = eval(*s.expr, frame);
  } else {
    std::string captured;
    exec(s.body, frame, captured);
    v = Value(std::move(captured));
  }
  if (s.attribute.empty()) {
    assign_targets(*frame, s.targets, v);
    return;
  }
  const Value* target = frame->find(s.targets[0]);
  if (!target || !target->is_dict() || !target->dict().is_namespace)
    throw RenderError(
        fmt::format("cannot assign attribute '{}' of '{}': not a namespace()", s.attribute, s.targets[0]));
  target->dict().set(s.attribute, std::move(v));
}

CallArgs Interpreter::eval_args(const Expr& e, const std::shared_ptr<Frame>& frame) {
  CallArgs args;
  args.positional.reserve(e.items.size());
  for (const ExprPtr& item : e.items) args.positional.push_back(eval(*item, frame));
  for (size_t k = 0; k < e.keyword_names.size(); ++k)
    args.keyword.emplace_back(e.keyword_names[k], eval(*e.keyword_values[k], frame));
  return args;
}

Value Interpreter::eval(const Expr& e, const std::shared_ptr<Frame>& frame) {
  line_ = e.line;
  switch (e.kind) {
    case Expr::Kind::Literal: return e.value;
    case Expr::Kind::Name: {
      const Value* v = frame->find(e.name);
      return v ? *v : Value::undefined(fmt::format("'{}' is undefined", e.name));
    }
    case Expr::Kind::List: {
      List items;
      items.reserve(e.items.size());
      for (const ExprPtr& item : e.items) items.push_back(eval(*item, frame));
      return Value(std::move(items));
    }
    case Expr::Kind::Dict: {
      auto dict = std::make_shared<Dict>();
      for (size_t k = 0; k < e.keys.size(); ++k) {
        Value key = eval(*e.keys[k], frame);
        if (!key.is_string()) throw RenderError(fmt::format("dict keys must be strings, not {}", key.type_name()));
        dict->set(key.as_string(), eval(*e.items[k], frame));
      }
      return Value(std::move(dict));
    }
    case Expr::Kind::Attribute: return get_attribute(eval(*e.object, frame), e.name);
    case Expr::Kind::Subscript: {
      Value obj = eval(*e.object, frame);
      return get_item(obj, eval(*e.items[0], frame));
    }
    case Expr::Kind::Slice: {
      Value obj = eval(*e.object, frame);
      Value bounds[3];
      for (int k = 0; k < 3; ++k)
        if (e.items[k]) bounds[k] = eval(*e.items[k], frame);
      return get_slice(obj, e.items[0] ? &bounds[0] : nullptr, e.items[1] ? &bounds[1] : nullptr,
                       e.items[2] ? &bounds[2] : nullptr);
    }
    case Expr::Kind::Call: {
      if (e.object->kind == Expr::Kind::Attribute) {  // obj.method(...) without a bound-method object
        Value obj = eval(*e.object->object, frame);
        CallArgs args = eval_args(e, frame);
        line_ = e.line;
        if (std::optional<Value> result = call_method(obj, e.object->name, args)) return *result;
        return call(get_attribute(obj, e.object->name), args);
      }
      Value fn = eval(*e.object, frame);
      CallArgs args = eval_args(e, frame);
      line_ = e.line;
      return call(fn, args);
    }
    case Expr::Kind::Filter: {
      Value input = eval(*e.object, frame);
      CallArgs args = eval_args(e, frame);
      line_ = e.line;
      return apply_filter(*this, e.name, input, args);
    }
    case Expr::Kind::Test: {
      Value v = eval(*e.object, frame);
      CallArgs args = eval_args(e, frame);
      line_ = e.line;
      return Value(apply_test(e.name, v, args) != e.negated);
    }
    case Expr::Kind::Unary: {
      Value v = eval(*e.object, frame);
      if (e.name == "not") return Value(!v.truthy());
      return unary_arithmetic(e.name, v);
    }
    case Expr::Kind::Binary: return eval_binary(e, frame);
    case Expr::Kind::Ternary:
      if (eval(*e.items[1], frame).truthy()) return eval(*e.items[0], frame);
      return e.items[2] ? eval(*e.items[2], frame) : Value::undefined("the ternary had no else branch");
  }
  return Value();
}

Value Interpreter::eval_binary(const Expr& e, const std::shared_ptr<Frame>& frame) {
  Value left = eval(*e.items[0], frame);
  if (e.name == "and") return left.truthy() ? eval(*e.items[1], frame) : left;
  if (e.name == "or") return left.truthy() ? left : eval(*e.items[1], frame);
  Value right = eval(*e.items[1], frame);
  line_ = e.line;
  return binary_operation(e.name, left, right);
}

Value Interpreter::call(const Value& fn, const CallArgs& args) {
  if (fn.is_undefined()) fail_undefined(fn);
  if (!fn.is_callable()) throw RenderError(fmt::format("'{}' object is not callable", fn.type_name()));
  return fn.callable()->call(*this, args);
}

std::string Interpreter::call_macro(const Stmt& macro, const std::shared_ptr<Frame>& closure, const CallArgs& args) {
  if (args.positional.size() > macro.targets.size())
    throw RenderError(fmt::format("macro '{}' takes not more than {} argument(s)", macro.name, macro.targets.size()));
  for (const auto& kw : args.keyword)
    if (std::find(macro.targets.begin(), macro.targets.end(), kw.first) == macro.targets.end())
      throw RenderError(fmt::format("macro '{}' takes no keyword argument '{}'", macro.name, kw.first));
  if (depth_ >= kMaxCallDepth) throw RenderError(fmt::format("macro calls nested deeper than {}", kMaxCallDepth));
  auto frame = std::make_shared<Frame>(closure);
  for (size_t k = 0; k < macro.targets.size(); ++k) {
    const Value* given = args.get(k, macro.targets[k]);
    if (given) frame->set(macro.targets[k], *given);
    else if (macro.defaults[k]) frame->set(macro.targets[k], eval(*macro.defaults[k], frame));
    else
      frame->set(macro.targets[k], Value::undefined(fmt::format("parameter '{}' was not provided", macro.targets[k])));
  }
  ++depth_;
  std::string out;
  try {
    exec(macro.body, frame, out);
  } catch (...) {
    --depth_;
    throw;
  }
  --depth_;
  return out;
}

std::string Interpreter::strftime_now(const std::string& format) const {
  std::tm when{};
  if (today_) {
    when = *today_;
  } else {
    std::time_t now = std::time(nullptr);
    localtime_r(&now, &when);
  }
  if (format.empty()) return {};
  std::string out(format.size() * 4 + 64, '\0');
  size_t n = std::strftime(out.data(), out.size(), format.c_str(), &when);
  out.resize(n);
  return out;
}

}  // namespace shardlm::chat
