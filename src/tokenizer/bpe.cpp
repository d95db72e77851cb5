#include <queue>

#include "tokenizer/encoders.h"
#include "tokenizer/unicode_text.h"

namespace shardlm::tok {

namespace {

uint64_t pair_key(int32_t left, int32_t right) { return uint64_t(uint32_t(left)) << 32 | uint32_t(right); }

struct Symbol {
  int prev, next;
  size_t start, n;
  int32_t piece;  // -1: text not named by any merge rule
};

struct Candidate {
  int32_t rank;
  int left, right;
  int32_t left_piece, right_piece, result;
};

struct ByRankThenLeft {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

int32_t BpeMerger::piece_id(std::string_view text) const {
  if (const TokenId id = vocab_.find(text); id >= 0) return id;
  if (non_token_pieces_.empty()) return -1;
  auto it = non_token_pieces_.find(text);
  return it == non_token_pieces_.end() ? -1 : it->second;
}

int32_t BpeMerger::intern(std::string_view text) {
  if (const TokenId id = vocab_.find(text); id >= 0) return id;
  auto it = non_token_pieces_.find(text);
  if (it != non_token_pieces_.end()) return it->second;
  const int32_t id = vocab_.size() + int32_t(non_token_pieces_.size());
  non_token_pieces_.emplace(std::string(text), id);
  return id;
}

BpeMerger::BpeMerger(const Vocabulary& vocab) : vocab_(vocab) {
  merges_.reserve(vocab.merges.size());
  std::string joined;
  for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
    const std::string_view line = vocab.merges[rank];
    // Split at the first space after the first byte, so a left side that
    // starts with a space survives (llama.cpp does the same).
    const size_t space = line.find(' ', 1);
    if (space == std::string::npos || space + 1 >= line.size()) continue;
    const int32_t left = intern(line.substr(0, space));
    const int32_t right = intern(line.substr(space + 1));
    joined.assign(line.substr(0, space));
    joined += line.substr(space + 1);
    const int32_t result = intern(joined);
    merges_.try_emplace(pair_key(left, right), Merge{int32_t(rank), result});  // first rule wins
  }
}

void BpeMerger::encode_word(std::string_view word, std::vector<TokenId>& out) const {
  if (vocab_.ignore_merges) {
    if (const TokenId id = vocab_.find(word); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (size_t pos = 0; pos < word.size();) {
    const size_t n = std::min(text::utf8_sequence_length(uint8_t(word[pos])), word.size() - pos);
    const int index = int(symbols.size());
    symbols.push_back({index - 1, pos + n < word.size() ? index + 1 : -1, pos, n, piece_id(word.substr(pos, n))});
    pos += n;
  }
  if (symbols.empty()) return;

  std::priority_queue<Candidate, std::vector<Candidate>, ByRankThenLeft> queue;
  auto consider = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const int32_t lp = symbols[size_t(left)].piece, rp = symbols[size_t(right)].piece;
    if (lp < 0 || rp < 0) return;
    auto it = merges_.find(pair_key(lp, rp));
    if (it == merges_.end()) return;
    queue.push({it->second.rank, left, right, lp, rp, it->second.result});
  };
  for (int i = 1; i < int(symbols.size()); ++i) consider(i - 1, i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[size_t(c.left)];
    Symbol& right = symbols[size_t(c.right)];
    // Symbols only grow, so unchanged pieces mean the pair is still adjacent and current.
    if (left.n == 0 || right.n == 0 || left.piece != c.left_piece || right.piece != c.right_piece) continue;
    left.n += right.n;
    left.piece = c.result;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[size_t(right.next)].prev = c.left;
    consider(left.prev, c.left);
    consider(c.left, left.next);
  }

  for (int i = 0; i >= 0; i = symbols[size_t(i)].next) {
    const Symbol& s = symbols[size_t(i)];
    const TokenId id = s.piece >= 0 ? token_of_piece(s.piece) : -1;
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (const char byte : word.substr(s.start, s.n))  // single-byte tokens, when the vocabulary has them
      if (const TokenId b = vocab_.find(std::string_view(&byte, 1)); b >= 0) out.push_back(b);
  }
}

}  // namespace shardlm::tok
