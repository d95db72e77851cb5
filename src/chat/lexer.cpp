#include "chat/lexer.h"

#include <cctype>
#include <cstdint>
#include <fmt/format.h>

#include "chat/errors.h"
#include "tokenizer/unicode_text.h"

namespace shardlm::chat {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// jinja2 reads the template with every line ending as "\n" and, unless told
// to keep it, without the final newline.
std::string normalize(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  std::vector<Token> run() {
    bool line_starting = true;  // the previous tag's end swallowed a newline
    while (pos_ < src_.size()) {
      size_t tag = find_tag(pos_);
      std::string text = src_.substr(pos_, tag - pos_);
      if (tag == src_.size()) {
        emit_text(std::move(text), pos_);
        pos_ = tag;
        break;
      }
      char kind = src_[tag + 1];  // '{', '%' or '#'
      char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign == '-') {
        text.erase(text.find_last_not_of(" \t\n\r\f\v") + 1);
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: drop the indentation before a block or comment tag
        // that starts its line.
        size_t line_start = text.rfind('\n');
        line_start = line_start == std::string::npos ? 0 : line_start + 1;
        bool only_space = text.find_first_not_of(" \t\r\f\v", line_start) == std::string::npos;
        if ((line_start > 0 || line_starting) && only_space) text.erase(line_start);
      }
      emit_text(std::move(text), pos_);
      pos_ = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        line_starting = skip_comment(tag);
      } else {
        push(kind == '%' ? TokenKind::BlockBegin : TokenKind::VarBegin, kind == '%' ? "{%" : "{{", tag);
        line_starting = lex_tag(kind == '%' ? '%' : '}', tag);
      }
    }
    push(TokenKind::End, "", pos_);
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return src_.size();
  }

  // Line and column of an offset; offsets only grow, so this walks once.
  void locate(size_t offset, int& line, int& column) {
    for (; scan_pos_ < offset; ++scan_pos_) {
      if (src_[scan_pos_] == '\n') {
        ++scan_line_;
        scan_line_start_ = scan_pos_ + 1;
      }
    }
    line = scan_line_;
    column = static_cast<int>(offset - scan_line_start_) + 1;
  }

  [[noreturn]] void fail(const std::string& message, size_t offset) {
    int line, column;
    locate(offset, line, column);
    throw ParseError(message, line, column);
  }

  void push(TokenKind kind, std::string text, size_t offset) {
    Token t{kind, std::move(text)};
    locate(offset, t.line, t.column);
    tokens_.push_back(std::move(t));
  }

  void emit_text(std::string text, size_t offset) {
    if (!text.empty()) push(TokenKind::Text, std::move(text), offset);
  }

  // After the closing marker: `-` eats all whitespace, `+` nothing, and
  // otherwise trim_blocks eats one newline (blocks and comments only).
  // Returns whether a newline was eaten.
  bool after_tag_end(char sign, bool trims) {
    size_t start = pos_;
    if (sign == '-') {
      while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
    } else if (sign != '+' && trims && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
    }
    return pos_ > start && src_[pos_ - 1] == '\n';
  }

  bool skip_comment(size_t open) {
    size_t close = src_.find("#}", pos_);
    if (close == std::string::npos) fail("unterminated comment", open);
    char sign = close > pos_ ? src_[close - 1] : '\0';
    pos_ = close + 2;
    return after_tag_end(sign == '-' || sign == '+' ? sign : '\0', true);
  }

  // Tokens up to the tag's end (`%}` or `}}`); returns whether the end ate a newline.
  bool lex_tag(char closer, size_t open) {
    const bool block = closer == '%';
    for (;;) {
      while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
      if (pos_ >= src_.size()) fail(block ? "unterminated '{%' tag" : "unterminated '{{' tag", open);
      char c = src_[pos_];
      for (char sign : {'-', '+', '\0'}) {
        size_t at = pos_ + (sign ? 1 : 0);
        if (sign && src_[pos_] != sign) continue;
        if (at + 1 < src_.size() && src_[at] == closer && src_[at + 1] == '}') {
          // `}}` inside `{{ {...} }}` closes a dict when braces are open.
          if (!block && sign == '\0' && brace_depth_ > 0) break;
          push(block ? TokenKind::BlockEnd : TokenKind::VarEnd, block ? "%}" : "}}", pos_);
          pos_ = at + 2;
          brace_depth_ = 0;
          return after_tag_end(sign, block);
        }
      }
      if (is_name_start(c)) {
        size_t start = pos_;
        while (pos_ < src_.size() && is_name_char(src_[pos_])) ++pos_;
        push(TokenKind::Name, src_.substr(start, pos_ - start), start);
      } else if (is_digit(c)) {
        lex_number();
      } else if (c == '\'' || c == '"') {
        lex_string();
      } else {
        lex_operator();
      }
    }
  }

  void lex_number() {
    size_t start = pos_;
    auto digits = [&] {
      while (pos_ < src_.size() && (is_digit(src_[pos_]) || (src_[pos_] == '_' && pos_ + 1 < src_.size() && is_digit(src_[pos_ + 1])))) ++pos_;
    };
    digits();
    bool is_float = false;
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && is_digit(src_[pos_ + 1])) {
      is_float = true;
      ++pos_;
      digits();
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t e = pos_ + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && is_digit(src_[e])) {
        is_float = true;
        pos_ = e;
        digits();
      }
    }
    std::string text;
    for (size_t i = start; i < pos_; ++i)
      if (src_[i] != '_') text += src_[i];
    push(is_float ? TokenKind::Float : TokenKind::Integer, std::move(text), start);
  }

  // Python's unicode-escape rules, which jinja2 applies to string literals;
  // an unknown escape keeps its backslash.
  void lex_string() {
    size_t start = pos_;
    char quote = src_[pos_++];
    std::string value;
    for (;;) {
      if (pos_ >= src_.size()) fail("unterminated string", start);
      char c = src_[pos_++];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        continue;
      }
      if (pos_ >= src_.size()) fail("unterminated string", start);
      char e = src_[pos_++];
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case 'a': value += '\a'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'v': value += '\v'; break;
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case '\n': break;  // line continuation
        case 'x': case 'u': case 'U': {
          size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (pos_ + n > src_.size()) fail(fmt::format("truncated \\{} escape", e), pos_ - 2);
          uint32_t cp = 0;
          for (size_t k = 0; k < n; ++k) {
            char h = src_[pos_ + k];
            if (!std::isxdigit(static_cast<unsigned char>(h))) fail(fmt::format("truncated \\{} escape", e), pos_ - 2);
            cp = cp * 16 + static_cast<uint32_t>(is_digit(h) ? h - '0' : (std::tolower(h) - 'a' + 10));
          }
          if (cp > 0x10FFFF) fail("escape beyond U+10FFFF", pos_ - 2);
          pos_ += n;
          text::append_utf8(value, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {  // octal, up to three digits
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '7'; ++k)
              cp = cp * 8 + static_cast<uint32_t>(src_[pos_++] - '0');
            text::append_utf8(value, cp);
          } else {
            value += '\\';
            value += e;
          }
      }
    }
    push(TokenKind::String, std::move(value), start);
  }

  void lex_operator() {
    static const char* const kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* op : kTwo) {
      if (src_.compare(pos_, 2, op) == 0) {
        push(TokenKind::Operator, op, pos_);
        pos_ += 2;
        return;
      }
    }
    char c = src_[pos_];
    static const std::string kOne = "+-*/%~<>=.,:|()[]{}";
    if (kOne.find(c) == std::string::npos) fail(fmt::format("unexpected character '{}'", c), pos_);
    if (c == '{') ++brace_depth_;
    if (c == '}' && brace_depth_ > 0) --brace_depth_;
    push(TokenKind::Operator, std::string(1, c), pos_);
    ++pos_;
  }

  std::string src_;
  size_t pos_ = 0;
  int brace_depth_ = 0;
  std::vector<Token> tokens_;
  size_t scan_pos_ = 0, scan_line_start_ = 0;
  int scan_line_ = 1;
};

}  // namespace

std::vector<Token> lex(std::string_view source) { return Lexer(normalize(source)).run(); }

}  // namespace shardlm::chat
