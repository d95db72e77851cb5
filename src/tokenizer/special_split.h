// Cuts the text of special tokens out of a prompt, as llama.cpp does: token
// by token, longest text first, every occurrence in the text that is left.
// CONTROL and UNKNOWN tokens are cut only when parse_special is set;
// USER_DEFINED tokens always are.
#pragma once

#include <bitset>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/vocab.h"

namespace shardlm::tok {

struct Fragment {
  TokenId token = -1;            // a special token, or -1 for plain text...
  size_t begin = 0, end = 0;     // ...in these bytes of the text
};

class SpecialSplitter {
 public:
  explicit SpecialSplitter(const Vocabulary& vocab);
  std::vector<Fragment> split(std::string_view text, bool parse_special) const;

 private:
  struct Entry {
    TokenId id;
    int order;  // index in vocab.special_by_length
  };
  const Vocabulary& vocab_;
  // Special texts by content, used to find which of them occur at all
  // before running the per-token passes (vocabularies have thousands).
  std::unordered_map<std::string_view, Entry> by_text_;
  std::vector<size_t> lengths_;  // distinct text lengths
  std::bitset<256> first_bytes_;
};

}  // namespace shardlm::tok
