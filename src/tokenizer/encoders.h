// The two subword algorithms, applied to one fragment of text that holds no
// special token.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/vocab.h"

namespace shardlm::tok {

// SentencePiece-style BPE by scores: starting from single characters, the
// adjacent pair whose concatenation is the highest-scoring token is merged
// until none is left; pieces not in the vocabulary fall back to byte tokens.
// `text` already has spaces replaced by U+2581.
void spm_encode(const Vocabulary& vocab, std::string_view text, std::vector<TokenId>& out);

// Byte-level BPE by merge ranks over one pre-token that is already written
// in the GPT-2 byte alphabet.
class BpeMerger {
 public:
  explicit BpeMerger(const Vocabulary& vocab);
  void encode_word(std::string_view word, std::vector<TokenId>& out) const;

 private:
  // Every string in a merge rule gets an integer "piece id" so merging
  // compares integers instead of building strings: its token id when it is
  // a token, else an id past the vocabulary.
  struct Merge {
    int32_t rank;
    int32_t result;  // piece id of left+right
  };
  int32_t piece_id(std::string_view text) const;
  int32_t intern(std::string_view text);
  TokenId token_of_piece(int32_t piece) const { return piece < vocab_.size() ? piece : -1; }

  const Vocabulary& vocab_;
  TextMap non_token_pieces_;
  std::unordered_map<uint64_t, Merge> merges_;
};

}  // namespace shardlm::tok
