#include "chat/parser.h"

#include <charconv>
#include <cstdlib>
#include <fmt/format.h>
#include <initializer_list>
#include <string_view>

#include "chat/builtins.h"
#include "chat/errors.h"

namespace shardlm::chat {

namespace {

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Body parse_template() {
    Body body = parse_body({});
    return body;
  }

 private:
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t ahead = 1) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  const Token& advance() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }

  bool is_op(std::string_view op) const { return cur().kind == TokenKind::Operator && cur().text == op; }
  bool is_name(std::string_view name) const { return cur().kind == TokenKind::Name && cur().text == name; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::End: return "end of template";
      case TokenKind::BlockEnd: return "'%}'";
      case TokenKind::VarEnd: return "'}}'";
      case TokenKind::Text: return "text";
      case TokenKind::String: return "string";
      default: return "'" + t.text + "'";
    }
  }

  [[noreturn]] void fail(const std::string& message, const Token& at) const {
    throw ParseError(message, at.line, at.column);
  }
  [[noreturn]] void fail_expected(const std::string& what) const {
    fail(fmt::format("expected {}, found {}", what, describe(cur())), cur());
  }

  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail_expected(fmt::format("'{}'", op));
  }
  std::string expect_name() {
    if (cur().kind != TokenKind::Name) fail_expected("a name");
    return advance().text;
  }
  void expect_block_end() {
    if (cur().kind != TokenKind::BlockEnd) fail_expected("'%}'");
    advance();
  }

  template <class Node>
  static std::unique_ptr<Node> make(typename Node::Kind kind, const Token& at) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->line = at.line;
    n->column = at.column;
    return n;
  }

  // ---- statements ----

  // Parses until `{% <one of end_tags>`; leaves the tag name as the current token.
  Body parse_body(std::initializer_list<std::string_view> end_tags) {
    Body body;
    for (;;) {
      const Token& t = cur();
      switch (t.kind) {
        case TokenKind::Text: {
          auto s = make<Stmt>(Stmt::Kind::Text, t);
          s->text = t.text;
          advance();
          body.push_back(std::move(s));
          break;
        }
        case TokenKind::VarBegin: {
          auto s = make<Stmt>(Stmt::Kind::Output, t);
          advance();
          s->expr = parse_tuple_or_expr();
          if (cur().kind != TokenKind::VarEnd) fail_expected("'}}'");
          advance();
          body.push_back(std::move(s));
          break;
        }
        case TokenKind::BlockBegin: {
          const Token& name = peek();
          if (name.kind != TokenKind::Name) {
            advance();
            fail_expected("a tag name");
          }
          for (std::string_view end : end_tags) {
            if (name.text == end) {
              advance();
              return body;
            }
          }
          advance();
          body.push_back(parse_statement());
          break;
        }
        case TokenKind::End:
          if (end_tags.size() != 0) {
            std::string expected;
            for (std::string_view e : end_tags) expected += (expected.empty() ? "'" : " or '") + std::string(e) + "'";
            fail(fmt::format("unexpected end of template, expected {}", expected), t);
          }
          return body;
        default:
          fail(fmt::format("unexpected {}", describe(t)), t);
      }
    }
  }

  StmtPtr parse_statement() {
    NestingGuard guard(*this);
    const Token& tag = cur();
    std::string name = advance().text;
    if (name == "if") return parse_if(tag);
    if (name == "for") return parse_for(tag);
    if (name == "set") return parse_set(tag);
    if (name == "macro") return parse_macro(tag);
    if (name == "break" || name == "continue") {
      expect_block_end();
      if (loop_depth_ == 0) fail(fmt::format("'{}' outside a loop", name), tag);
      return make<Stmt>(name == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, tag);
    }
    if (name == "generation") {
      expect_block_end();
      auto s = make<Stmt>(Stmt::Kind::Block, tag);
      s->body = parse_body({"endgeneration"});
      advance();
      expect_block_end();
      return s;
    }
    fail(fmt::format("unknown or unsupported tag '{}'", name), tag);
  }

  StmtPtr parse_if(const Token& tag) {
    auto s = make<Stmt>(Stmt::Kind::If, tag);
    for (;;) {
      ExprPtr condition = parse_expr();
      expect_block_end();
      Body body = parse_body({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(condition), std::move(body));
      std::string end = advance().text;
      if (end == "elif") continue;
      if (end == "else") {
        expect_block_end();
        s->else_body = parse_body({"endif"});
        advance();
      }
      expect_block_end();
      return s;
    }
  }

  StmtPtr parse_for(const Token& tag) {
    auto s = make<Stmt>(Stmt::Kind::For, tag);
    do {
      s->targets.push_back(expect_name());
    } while (skip_op(","));
    if (!skip_name("in")) fail_expected("'in'");
    s->expr = parse_or();
    if (skip_name("if")) s->condition = parse_expr();
    if (is_name("recursive")) fail("recursive loops are not supported", cur());
    expect_block_end();
    ++loop_depth_;
    s->body = parse_body({"else", "endfor"});
    --loop_depth_;
    if (advance().text == "else") {
      expect_block_end();
      s->else_body = parse_body({"endfor"});
      advance();
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_set(const Token& tag) {
    auto s = make<Stmt>(Stmt::Kind::Set, tag);
    s->targets.push_back(expect_name());
    if (skip_op(".")) {
      s->attribute = expect_name();
    } else {
      while (skip_op(",")) s->targets.push_back(expect_name());
    }
    if (skip_op("=")) {
      s->expr = parse_tuple_or_expr();
      expect_block_end();
      return s;
    }
    if (s->targets.size() != 1 || !s->attribute.empty()) fail_expected("'='");
    expect_block_end();
    s->body = parse_body({"endset"});
    advance();
    expect_block_end();
    return s;
  }

  StmtPtr parse_macro(const Token& tag) {
    auto s = make<Stmt>(Stmt::Kind::Macro, tag);
    s->name = expect_name();
    expect_op("(");
    while (!is_op(")")) {
      if (!s->targets.empty()) expect_op(",");
      if (is_op(")")) break;
      s->targets.push_back(expect_name());
      s->defaults.push_back(skip_op("=") ? parse_expr() : nullptr);
    }
    advance();
    expect_block_end();
    int saved_loops = loop_depth_;
    loop_depth_ = 0;  // break/continue do not cross a macro's boundary
    s->body = parse_body({"endmacro"});
    loop_depth_ = saved_loops;
    advance();
    expect_block_end();
    return s;
  }

  // ---- expressions, loosest binding first ----

  // `a, b` without brackets is a tuple (in {{ }} and set).
  ExprPtr parse_tuple_or_expr() {
    const Token& start = cur();
    ExprPtr first = parse_expr();
    if (!is_op(",")) return first;
    auto tuple = make<Expr>(Expr::Kind::List, start);
    tuple->items.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().kind == TokenKind::BlockEnd || cur().kind == TokenKind::VarEnd) break;
      tuple->items.push_back(parse_expr());
    }
    return tuple;
  }

  ExprPtr parse_expr() {
    NestingGuard guard(*this);
    ExprPtr e = parse_or();
    while (is_name("if")) {
      auto t = make<Expr>(Expr::Kind::Ternary, advance());
      t->items.push_back(std::move(e));
      t->items.push_back(parse_or());
      t->items.push_back(skip_name("else") ? parse_expr() : nullptr);
      e = std::move(t);
    }
    return e;
  }

  ExprPtr binary(const Token& at, std::string op, ExprPtr left, ExprPtr right) {
    auto b = make<Expr>(Expr::Kind::Binary, at);
    b->name = std::move(op);
    b->items.push_back(std::move(left));
    b->items.push_back(std::move(right));
    return b;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const Token& at = advance();
      e = binary(at, "or", std::move(e), parse_and());
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const Token& at = advance();
      e = binary(at, "and", std::move(e), parse_not());
    }
    return e;
  }

  ExprPtr parse_not() {
    NestingGuard guard(*this);
    if (is_name("not")) {
      auto u = make<Expr>(Expr::Kind::Unary, advance());
      u->name = "not";
      u->object = parse_not();
      return u;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr e = parse_math1();
    bool compared = false;
    for (;;) {
      const Token& at = cur();
      std::string op;
      if (at.kind == TokenKind::Operator &&
          (at.text == "==" || at.text == "!=" || at.text == "<" || at.text == "<=" || at.text == ">" || at.text == ">=")) {
        op = at.text;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().kind == TokenKind::Name && peek().text == "in") {
        op = "not in";
        advance();
        advance();
      } else {
        return e;
      }
      if (compared) fail("chained comparisons are not supported; use 'and'", at);
      compared = true;
      e = binary(at, op, std::move(e), parse_math1());
    }
  }

  template <class Next>
  ExprPtr parse_left_assoc(std::initializer_list<std::string_view> ops, Next next) {
    ExprPtr e = (this->*next)();
    for (;;) {
      bool matched = false;
      for (std::string_view op : ops) {
        if (is_op(op)) {
          const Token& at = advance();
          e = binary(at, std::string(op), std::move(e), (this->*next)());
          matched = true;
          break;
        }
      }
      if (!matched) return e;
    }
  }

  ExprPtr parse_math1() { return parse_left_assoc({"+", "-"}, &Parser::parse_concat); }
  ExprPtr parse_concat() { return parse_left_assoc({"~"}, &Parser::parse_math2); }
  ExprPtr parse_math2() { return parse_left_assoc({"*", "/", "//", "%"}, &Parser::parse_pow); }
  ExprPtr parse_pow() { return parse_left_assoc({"**"}, &Parser::parse_unary_filtered); }
  ExprPtr parse_unary_filtered() { return parse_unary(true); }

  ExprPtr parse_unary(bool with_filter) {
    NestingGuard guard(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = make<Expr>(Expr::Kind::Unary, cur());
      e->name = advance().text;
      e->object = parse_unary(false);
    } else {
      e = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filters_and_tests(std::move(e)) : std::move(e);
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    switch (t.kind) {
      case TokenKind::Name: {
        advance();
        if (t.text == "true" || t.text == "True") return literal(t, Value(true));
        if (t.text == "false" || t.text == "False") return literal(t, Value(false));
        if (t.text == "none" || t.text == "None") return literal(t, Value::none());
        auto n = make<Expr>(Expr::Kind::Name, t);
        n->name = t.text;
        return n;
      }
      case TokenKind::String: {
        std::string s = advance().text;
        while (cur().kind == TokenKind::String) s += advance().text;  // "a" "b" is "ab"
        return literal(t, Value(std::move(s)));
      }
      case TokenKind::Integer: {
        int64_t v = 0;
        auto [p, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
        if (ec != std::errc()) fail("integer literal out of range", t);
        advance();
        return literal(t, Value(v));
      }
      case TokenKind::Float: {
        advance();
        return literal(t, Value(std::strtod(t.text.c_str(), nullptr)));  // 1e999 is inf, as in Python
      }
      case TokenKind::Operator:
        if (t.text == "(") {
          advance();
          auto tuple = make<Expr>(Expr::Kind::List, t);
          if (skip_op(")")) return tuple;
          ExprPtr first = parse_expr();
          if (skip_op(")")) return first;
          tuple->items.push_back(std::move(first));
          while (skip_op(",")) {
            if (is_op(")")) break;
            tuple->items.push_back(parse_expr());
          }
          expect_op(")");
          return tuple;
        }
        if (t.text == "[") {
          advance();
          auto list = make<Expr>(Expr::Kind::List, t);
          while (!skip_op("]")) {
            if (!list->items.empty()) expect_op(",");
            if (skip_op("]")) break;
            list->items.push_back(parse_expr());
          }
          return list;
        }
        if (t.text == "{") {
          advance();
          auto dict = make<Expr>(Expr::Kind::Dict, t);
          while (!skip_op("}")) {
            if (!dict->items.empty()) expect_op(",");
            if (skip_op("}")) break;
            dict->keys.push_back(parse_expr());
            expect_op(":");
            dict->items.push_back(parse_expr());
          }
          return dict;
        }
        break;
      default:
        break;
    }
    fail_expected("an expression");
  }

  ExprPtr literal(const Token& at, Value v) {
    auto e = make<Expr>(Expr::Kind::Literal, at);
    e->value = std::move(v);
    return e;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    for (;;) {
      const Token& at = cur();
      if (skip_op(".")) {
        if (cur().kind == TokenKind::Integer) {  // x.0 is x[0]
          auto sub = make<Expr>(Expr::Kind::Subscript, at);
          sub->object = std::move(e);
          sub->items.push_back(parse_primary());
          e = std::move(sub);
        } else {
          auto attr = make<Expr>(Expr::Kind::Attribute, at);
          attr->object = std::move(e);
          attr->name = expect_name();
          e = std::move(attr);
        }
      } else if (skip_op("[")) {
        e = parse_subscript(at, std::move(e));
      } else if (is_op("(")) {
        auto call = make<Expr>(Expr::Kind::Call, at);
        call->object = std::move(e);
        parse_call_args(*call);
        e = std::move(call);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(const Token& at, ExprPtr object) {
    ExprPtr start = is_op(":") ? nullptr : parse_expr();
    if (skip_op("]")) {
      auto sub = make<Expr>(Expr::Kind::Subscript, at);
      sub->object = std::move(object);
      sub->items.push_back(std::move(start));
      return sub;
    }
    expect_op(":");
    auto slice = make<Expr>(Expr::Kind::Slice, at);
    slice->object = std::move(object);
    slice->items.push_back(std::move(start));
    slice->items.push_back(is_op(":") || is_op("]") ? nullptr : parse_expr());
    slice->items.push_back(skip_op(":") && !is_op("]") ? parse_expr() : nullptr);
    expect_op("]");
    return slice;
  }

  // `(a, b, name=c)`; the current token is "(".
  void parse_call_args(Expr& call) {
    expect_op("(");
    bool first = true;
    while (!skip_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (skip_op(")")) break;
      if (cur().kind == TokenKind::Name && peek().kind == TokenKind::Operator && peek().text == "=") {
        call.keyword_names.push_back(advance().text);
        advance();
        call.keyword_values.push_back(parse_expr());
      } else {
        if (!call.keyword_names.empty()) fail("positional argument after a keyword argument", cur());
        call.items.push_back(parse_expr());
      }
    }
  }

  ExprPtr parse_filters_and_tests(ExprPtr e) {
    for (;;) {
      const Token& at = cur();
      if (skip_op("|")) {
        auto f = make<Expr>(Expr::Kind::Filter, at);
        const Token& name = cur();
        f->name = expect_name();
        if (!has_filter(f->name)) fail(fmt::format("no filter named '{}'", f->name), name);
        f->object = std::move(e);
        if (is_op("(")) parse_call_args(*f);
        e = std::move(f);
      } else if (is_name("is")) {
        advance();
        auto test = make<Expr>(Expr::Kind::Test, at);
        test->negated = skip_name("not");
        const Token& name = cur();
        test->name = expect_name();
        if (!has_test(test->name)) fail(fmt::format("no test named '{}'", test->name), name);
        test->object = std::move(e);
        const Token& next = cur();
        if (is_op("(")) {
          parse_call_args(*test);
        } else if ((next.kind == TokenKind::Name && next.text != "else" && next.text != "or" && next.text != "and") ||
                   next.kind == TokenKind::String || next.kind == TokenKind::Integer || next.kind == TokenKind::Float ||
                   is_op("[") || is_op("{")) {
          test->items.push_back(parse_postfix(parse_primary()));  // `x is divisibleby 3`
        }
        e = std::move(test);
      } else if (is_op("(")) {
        auto call = make<Expr>(Expr::Kind::Call, at);
        call->object = std::move(e);
        parse_call_args(*call);
        e = std::move(call);
      } else {
        return e;
      }
    }
  }

  // Bounds the parser's recursion, so a hostile template cannot overflow the stack.
  struct NestingGuard {
    NestingGuard(Parser& p) : p(p) {
      if (++p.nesting_ > kMaxNesting) p.fail(fmt::format("nested more than {} levels deep", kMaxNesting), p.cur());
    }
    ~NestingGuard() { --p.nesting_; }
    Parser& p;
  };
  static constexpr int kMaxNesting = 200;

  const std::vector<Token>& t_;
  size_t i_ = 0;
  int loop_depth_ = 0;
  int nesting_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_template(); }

}  // namespace shardlm::chat
