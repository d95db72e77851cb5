// Runs a parsed template over a context with jinja2's scoping: each loop
// iteration and each macro call gets its own frame, so `set` inside them is
// invisible outside (namespace() objects are how templates carry state out).
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "chat/ast.h"
#include "chat/value.h"

namespace shardlm::chat {

class Frame {
 public:
  explicit Frame(std::shared_ptr<Frame> parent) : parent_(std::move(parent)) {}
  const Value* find(const std::string& name) const;
  void set(const std::string& name, Value v);

 private:
  std::shared_ptr<Frame> parent_;
  std::vector<std::pair<std::string, Value>> vars_;
};

class Interpreter {
 public:
  // `today` fixes what strftime_now() sees (tests, golden files); else the clock.
  explicit Interpreter(std::optional<std::tm> today) : today_(today) {}

  // Renders `body` with the top-level keys of `context` as variables.
  std::string render(const Body& body, const Value& context);

  Value eval(const Expr& e, const std::shared_ptr<Frame>& frame);
  Value call(const Value& fn, const CallArgs& args);
  // Renders a macro's body in a fresh frame whose parent is `closure`.
  std::string call_macro(const Stmt& macro, const std::shared_ptr<Frame>& closure, const CallArgs& args);
  std::string strftime_now(const std::string& format) const;
  // Line of the statement or expression being evaluated, for error messages.
  int line() const { return line_; }

 private:
  enum class Flow { Normal, Break, Continue };
  Flow exec(const Body& body, const std::shared_ptr<Frame>& frame, std::string& out);
  Flow exec_for(const Stmt& s, const std::shared_ptr<Frame>& frame, std::string& out);
  void exec_set(const Stmt& s, const std::shared_ptr<Frame>& frame);
  Value eval_binary(const Expr& e, const std::shared_ptr<Frame>& frame);
  CallArgs eval_args(const Expr& e, const std::shared_ptr<Frame>& frame);

  std::optional<std::tm> today_;
  int line_ = 0;
  int depth_ = 0;  // nested macro calls, bounded so a recursive macro cannot overflow the stack
};

}  // namespace shardlm::chat
