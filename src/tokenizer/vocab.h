// A GGUF vocabulary as llama.cpp interprets it: token texts, scores and
// attributes, special token ids, and the tokenizer flags (add BOS/EOS, space
// prefix, clean-up of spaces) with llama.cpp's defaults per tokenizer kind.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace shardlm::gguf { class File; }

namespace shardlm::tok {

// Bit flags; a token can gain CONTROL on top of its GGUF type (see load()).
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
};

struct TokenInfo {
  std::string text;
  float score = 0.0f;
  uint32_t attr = kAttrNormal;
};

// Hash that accepts std::string_view lookups without building a std::string.
struct TextHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using TextMap = std::unordered_map<std::string, TokenId, TextHash, std::equal_to<>>;


// Open-addressing index from token text to id over the token list itself:
// one allocation for the whole vocabulary, so 100k tokens load in
// milliseconds and lookups touch one cache line most of the time.
class TextIndex {
 public:
  void build(const std::vector<TokenInfo>& tokens);  // a repeated text maps to its last id
  TokenId find(std::string_view text, const std::vector<TokenInfo>& tokens) const;

 private:
  struct Slot {
    uint32_t hash;
    TokenId id;  // -1: empty
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

enum class VocabKind { Spm, Bpe };

struct Vocabulary {
  VocabKind kind = VocabKind::Spm;
  std::string source;  // file path, for messages
  std::string pre;     // tokenizer.ggml.pre as given ("" if missing)
  std::vector<TokenInfo> tokens;
  TextIndex text_index;  // a repeated text maps to its last id, as in llama.cpp

  TokenId bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, pad = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;  // SPM: "▁" before text that starts a fragment
  bool clean_spaces = false;      // decode: " ," → "," etc. (llama.cpp clean_up_tokenization_spaces)
  bool ignore_merges = false;     // BPE: a pre-token that is a whole token is taken as is

  std::unordered_set<TokenId> end_of_generation;
  // CONTROL, USER_DEFINED and UNKNOWN tokens, longest text first: the order
  // in which their text is cut out of a prompt.
  std::vector<TokenId> special_by_length;
  std::array<TokenId, 256> byte_token{};  // SPM "<0xNN>" tokens, -1 when absent
  std::vector<std::string> merges;        // BPE "left right" lines, rank = index

  TokenId find(std::string_view text) const { return text_index.find(text, tokens); }
  bool has_attr(TokenId id, uint32_t attr) const { return (tokens[size_t(id)].attr & attr) != 0; }
  int size() const { return int(tokens.size()); }

  static Vocabulary load(const gguf::File& file);
};

}  // namespace shardlm::tok
