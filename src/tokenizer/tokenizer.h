// Tokenizers built from a GGUF vocabulary: SentencePiece-style (`llama`) and
// byte-level BPE (`gpt2`, pre-tokenizer chosen by tokenizer.ggml.pre).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
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
  // Bytes of one token (special tokens rendered as their text when special=true).
  virtual std::string token_to_piece(TokenId id, bool special = true) const = 0;
  std::string decode(const std::vector<TokenId>& ids, bool special = false) const;

  virtual int n_vocab() const = 0;
  virtual TokenId bos() const = 0;   // -1 if none
  virtual TokenId eos() const = 0;   // -1 if none
  virtual bool is_end_of_generation(TokenId id) const = 0;  // EOS, EOT, ...
  virtual std::string_view kind() const = 0;  // "llama" or "gpt2"
};

// Turns a stream of tokens into text without ever emitting half a UTF-8
// character: bytes of an unfinished character wait for the next token.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok) : tok_(tok) {}
  std::string push(TokenId id);  // complete characters now available
  std::string flush();           // whatever is left (invalid tail → U+FFFD)

 private:
  const Tokenizer& tok_;
  std::string pending_;
  bool first_ = true;
};

}  // namespace shardlm
