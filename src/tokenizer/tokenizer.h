// Tokenizers built from a GGUF vocabulary: SentencePiece-style (`llama`) and
// byte-level BPE (`gpt2`, pre-tokenizer chosen by tokenizer.ggml.pre).
// Behaviour follows llama.cpp's llama_tokenize / llama_token_to_piece /
// llama_detokenize token for token (tests compare against its outputs). An
// unknown tokenizer.ggml.pre falls back to the default regexes with a
// warning, as llama.cpp does. A Tokenizer is immutable after from_gguf, so
// all const methods may be called from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardlm::gguf { class File; }

namespace shardlm {

using TokenId = int32_t;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Throws Error naming the file and key for a missing/unsupported vocabulary.
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::File& file);

  // add_special: add BOS (and EOS) as the vocabulary asks; parse_special: turn
  // the text of special/control tokens in `text` into those tokens.
  virtual std::vector<TokenId> encode(std::string_view text, bool add_special, bool parse_special) const = 0;
  // encode(text, false, true) except that special-token text lying in any of
  // the byte ranges `plain` (user text inside a rendered chat prompt) stays
  // text. The text is tokenized whole, so pieces merge across the ranges'
  // edges as in the rest of the text (a prompt's token count then matches
  // other engines').
  virtual std::vector<TokenId> encode_with_plain(std::string_view text,
                                                 const std::vector<std::pair<size_t, size_t>>& plain) const = 0;
  // Bytes of one token (special tokens rendered as their text when special=true).
  virtual std::string token_to_piece(TokenId id, bool special = true) const = 0;
  std::string decode(const std::vector<TokenId>& ids, bool special = false) const;

  virtual int n_vocab() const = 0;
  virtual TokenId bos() const = 0;   // -1 if none
  virtual TokenId eos() const = 0;   // -1 if none
  virtual bool is_end_of_generation(TokenId id) const = 0;  // EOS, EOT, ...
  virtual std::string_view kind() const = 0;  // "llama" or "gpt2"

  // The vocabulary's own text of a token (e.g. "\xE2\x96\x81Hello", "<0x0A>", "Ġworld").
  virtual std::string_view token_text(TokenId id) const = 0;
  virtual bool adds_bos() const = 0;  // encode(..., add_special=true) starts with BOS
  // decode() drops one leading space of the first token (the SentencePiece
  // space prefix); StreamDecoder does the same.
  virtual bool strips_leading_space() const = 0;

 protected:
  // What decode() returns; like llama_detokenize(remove_special=false,
  // unparse_special=special), including the clean-up of " ," etc. that gpt2
  // vocabularies ask for.
  virtual std::string detokenize(const std::vector<TokenId>& ids, bool special) const = 0;
};

// Turns a stream of tokens into text without ever emitting half a UTF-8
// character: bytes of an unfinished character wait for the next token, and
// bytes that can never form one come out as U+FFFD. Special tokens are not
// rendered, except those in `shown_special` (markers a reply is read for,
// such as a model's tool-call tokens). Feed a whole sequence (prompt included) to get decode()'s text
// minus its gpt2 space clean-up; when only generated tokens are fed, pass
// at_sequence_start=false so the first one keeps its leading space.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool at_sequence_start = true, std::vector<TokenId> shown_special = {})
      : tok_(tok), shown_special_(std::move(shown_special)), first_(at_sequence_start) {}
  std::string push(TokenId id);  // complete characters now available
  std::string flush();           // whatever is left (invalid tail → U+FFFD)

 private:
  const Tokenizer& tok_;
  std::vector<TokenId> shown_special_;
  std::string pending_;
  bool first_;
};

}  // namespace shardlm
