#include "tokenizer/tokenizer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/encoders.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/special_split.h"
#include "tokenizer/unicode_text.h"
#include "tokenizer/vocab.h"

namespace shardlm {

namespace {

using tok::VocabKind;

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out += to;
  }
  out.append(s, pos);
  s = std::move(out);
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "<0xNN>" → byte NN, read as leniently as strtol would.
char byte_of_byte_token(const std::string& text) {
  int value = 0;
  for (size_t i = 3; i < std::min<size_t>(text.size(), 5); ++i) {
    const int d = hex_digit(text[i]);
    if (d < 0) break;
    value = value * 16 + d;
  }
  return char(value);
}

// Undoes the GPT-2 byte alphabet; code points outside it are kept visible
// the way llama.cpp shows them.
std::string bytes_of_bpe_text(const std::string& token_text) {
  std::string out;
  for (const uint32_t cp : text::decode_utf8_lenient(token_text)) {
    const int byte = text::bpe_char_to_byte(cp);
    if (byte >= 0) {
      out += char(byte);
      continue;
    }
    std::string utf8;
    text::append_utf8(utf8, cp);
    out += "[UNK_BYTE_0x";
    for (const char c : utf8) {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%02x", unsigned(uint8_t(c)));
      out += hex;
    }
    out += token_text + "]";
  }
  return out;
}

// llama.cpp's clean_up_tokenization_spaces, pass for pass: drop the space in
// " ?", " !", " .", " ,"; turn " ' " into "'"; drop the space before 's 'm
// 're 've. Works in place on a byte buffer exactly like the original so
// corner cases (e.g. a removed space read again later) match.
void clean_up_spaces(std::string& s) {
  size_t n = s.size();
  size_t total = n ? 1 : 0;
  for (size_t i = 1; i < n; ++i) {
    const char x = s[i];
    if (s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) --total;
    s[total++] = x;
  }
  n = total;
  total = n ? 1 : 0;
  for (size_t i = 1; i < n; ++i) {
    const char x = s[i];
    if (x == '\'' && i + 1 < n && s[i - 1] == ' ' && s[i + 1] == ' ') {
      --total;
      s[++i] = '\0';
    }
    s[total++] = x;
  }
  n = total;
  total = n ? 1 : 0;
  for (size_t i = 1; i < n; ++i) {
    const char x = s[i];
    if (s[i - 1] == ' ' && x == '\'' && i + 1 < n) {
      const char x1 = s[i + 1];
      if (x1 == 's' || x1 == 'm') --total;
      else if (i + 2 < n && ((x1 == 'r' && s[i + 2] == 'e') || (x1 == 'v' && s[i + 2] == 'e'))) --total;
    }
    s[total++] = x;
  }
  s.resize(total);
}

class VocabTokenizer final : public Tokenizer {
 public:
  explicit VocabTokenizer(tok::Vocabulary vocab) : vocab_(std::move(vocab)), specials_(vocab_) {
    if (vocab_.kind == VocabKind::Bpe) {
      const tok::PreTokenizerSpec spec = tok::pre_tokenizer_spec(vocab_.pre);
      if (!spec.known)
        spdlog::warn("{}: pre-tokenizer '{}' is not supported; using 'default' as llama.cpp does for names it "
                     "does not know (token ids may differ from the model's own tokenizer)",
                     vocab_.source, vocab_.pre);
      pre_ = std::make_unique<tok::PreTokenizer>(spec);
      merger_ = std::make_unique<tok::BpeMerger>(vocab_);
    }
    pieces_.reserve(vocab_.tokens.size());
    for (const auto& t : vocab_.tokens) pieces_.push_back(render(t));
  }

  std::vector<TokenId> encode(std::string_view text, bool add_special, bool parse_special) const override {
    return encode_fragments(text, specials_.split(text, parse_special), add_special);
  }

  std::vector<TokenId> encode_with_plain(std::string_view text,
                                         const std::vector<std::pair<size_t, size_t>>& plain) const override {
    std::vector<tok::Fragment> fragments;
    for (tok::Fragment f : specials_.split(text, true)) {
      const bool in_plain = f.token >= 0 && vocab_.has_attr(f.token, tok::kAttrControl | tok::kAttrUnknown) &&
                            std::any_of(plain.begin(), plain.end(), [&](const auto& r) { return f.begin < r.second && r.first < f.end; });
      if (in_plain) f.token = -1;
      if (f.token < 0 && !fragments.empty() && fragments.back().token < 0)
        fragments.back().end = f.end;  // one run of text with its neighbours
      else
        fragments.push_back(f);
    }
    return encode_fragments(text, fragments, false);
  }

 private:
  std::vector<TokenId> encode_fragments(std::string_view text, const std::vector<tok::Fragment>& fragments,
                                        bool add_special) const {
    std::vector<TokenId> out;
    out.reserve(text.size() / 3 + 4);
    if (add_special && vocab_.add_bos && vocab_.bos >= 0) out.push_back(vocab_.bos);
    bool after_special = true;  // the text start counts as following a special token
    for (const auto& f : fragments) {
      if (f.token >= 0) {
        out.push_back(f.token);
        after_special = true;
        continue;
      }
      const std::string_view piece = text.substr(f.begin, f.end - f.begin);
      if (vocab_.kind == VocabKind::Spm) {
        std::string s = vocab_.add_space_prefix && after_special ? " " : "";
        s += piece;
        replace_all(s, " ", kSpaceMark);
        tok::spm_encode(vocab_, s, out);
      } else {
        std::string word;
        for (const std::string& pre_token : pre_->split(piece)) {
          word.clear();
          for (const char byte : pre_token) word += text::byte_to_bpe_char(uint8_t(byte));
          merger_->encode_word(word, out);
        }
      }
      after_special = false;
    }
    if (add_special && vocab_.add_eos && vocab_.eos >= 0) out.push_back(vocab_.eos);
    return out;
  }

 public:
  std::string token_to_piece(TokenId id, bool special) const override {
    check(id);
    if (!special && vocab_.has_attr(id, tok::kAttrUnknown | tok::kAttrControl)) return {};
    return pieces_[size_t(id)];
  }

  int n_vocab() const override { return vocab_.size(); }
  TokenId bos() const override { return vocab_.bos; }
  TokenId eos() const override { return vocab_.eos; }
  bool is_end_of_generation(TokenId id) const override { return vocab_.end_of_generation.count(id) > 0; }
  std::string_view kind() const override { return vocab_.kind == VocabKind::Spm ? "llama" : "gpt2"; }
  std::string_view token_text(TokenId id) const override {
    check(id);
    return vocab_.tokens[size_t(id)].text;
  }
  bool adds_bos() const override { return vocab_.add_bos && vocab_.bos >= 0; }
  bool strips_leading_space() const override { return vocab_.add_space_prefix; }

 protected:
  std::string detokenize(const std::vector<TokenId>& ids, bool special) const override {
    std::string out;
    bool strip_space = vocab_.add_space_prefix;
    for (const TokenId id : ids) {
      std::string piece = token_to_piece(id, special);
      if (strip_space && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
      strip_space = false;
      out += piece;
    }
    if (vocab_.clean_spaces) clean_up_spaces(out);
    return out;
  }

 private:
  void check(TokenId id) const {
    if (id < 0 || id >= vocab_.size())
      throw Error(
          fmt::format("token id {} is outside the vocabulary of {} (0..{})", id, vocab_.source, vocab_.size() - 1));
  }

  std::string render(const tok::TokenInfo& t) const {
    if (t.attr & (tok::kAttrUnknown | tok::kAttrControl | tok::kAttrUserDefined)) return t.text;
    if (vocab_.kind == VocabKind::Spm) {
      if (t.attr & tok::kAttrNormal) {
        std::string s = t.text;
        replace_all(s, kSpaceMark, " ");
        return s;
      }
      if (t.attr & tok::kAttrByte) return std::string(1, byte_of_byte_token(t.text));
      return {};
    }
    return (t.attr & tok::kAttrNormal) ? bytes_of_bpe_text(t.text) : std::string();
  }

  tok::Vocabulary vocab_;
  tok::SpecialSplitter specials_;
  std::unique_ptr<tok::PreTokenizer> pre_;
  std::unique_ptr<tok::BpeMerger> merger_;
  std::vector<std::string> pieces_;  // token_to_piece(id, special=true)
};

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::File& file) {
  return std::make_unique<VocabTokenizer>(tok::Vocabulary::load(file));
}

std::string Tokenizer::decode(const std::vector<TokenId>& ids, bool special) const { return detokenize(ids, special); }

std::string StreamDecoder::push(TokenId id) {
  std::string piece = tok_.token_to_piece(id, std::find(shown_special_.begin(), shown_special_.end(), id) != shown_special_.end());
  if (first_ && tok_.strips_leading_space() && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
  first_ = false;
  pending_ += piece;
  std::string out;
  size_t pos = 0;
  while (pos < pending_.size()) {
    bool incomplete = false;
    const size_t n = text::complete_utf8_prefix(std::string_view(pending_).substr(pos), incomplete);
    out.append(pending_, pos, n);
    pos += n;
    if (pos == pending_.size() || incomplete) break;
    out += "\xEF\xBF\xBD";  // a byte that can never start or continue a character here
    ++pos;
  }
  pending_.erase(0, pos);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = pending_.empty() ? "" : "\xEF\xBF\xBD";
  pending_.clear();
  return out;
}

}  // namespace shardlm
