// The parsed form of a template: expressions and statements. Nodes are
// immutable after parsing, so one parse serves any number of renders.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/value.h"

namespace shardlm::chat {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,    // value
    Name,       // name
    List,       // items
    Dict,       // keys[i]: items[i]
    Attribute,  // object.name
    Subscript,  // object[items[0]]
    Slice,      // object[items[0]:items[1]:items[2]] (a null item is omitted)
    Call,       // object(items..., keyword_names[i]=keyword_values[i])
    Filter,     // object | name(items..., keywords)
    Test,       // object is [not] name(items...)
    Unary,      // op object           (op: "not", "-", "+")
    Binary,     // items[0] op items[1] (op: or and + - * / // % ** ~ in "not in" == != < <= > >=)
    Ternary,    // items[0] if items[1] else items[2] (items[2] may be null)
  };
  Kind kind;
  int line = 0, column = 0;
  Value value;           // Literal
  std::string name;      // Name, Attribute, Filter, Test; the operator for Unary/Binary
  bool negated = false;  // Test: `is not`
  ExprPtr object;
  std::vector<ExprPtr> items;
  std::vector<ExprPtr> keys;  // Dict
  std::vector<std::string> keyword_names;  // Call, Filter, Test
  std::vector<ExprPtr> keyword_values;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    Text,      // text
    Output,    // {{ expr }}
    If,        // branches: (condition, body)...; else_body
    For,       // for targets in expr [if condition]: body; else_body
    Set,       // set targets = expr | set target.attribute = expr | set target %}body{% endset
    Macro,     // macro name(params = defaults): body
    Break,
    Continue,
    Block,     // a body with no effect of its own ({% generation %})
  };
  Kind kind;
  int line = 0, column = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;  // For: the loop filter
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::string> targets;  // For / Set names; Macro parameter names
  std::string attribute;             // Set: `set targets[0].attribute = ...`
  std::vector<ExprPtr> defaults;     // Macro: one per parameter, null when none
  std::string name;                  // Macro
};

}  // namespace shardlm::chat
