#include <queue>

#include "tokenizer/encoders.h"
#include "tokenizer/unicode_text.h"

namespace shardlm::tok {

namespace {

struct SpmSymbol {
  int prev, next;
  size_t start, n;  // bytes of the text; n == 0 once merged into its left neighbour
};

struct SpmCandidate {
  float score;
  int left, right;
  size_t size;  // byte length when queued; a different length means it is stale
};

struct ByScoreThenLeft {
  bool operator()(const SpmCandidate& a, const SpmCandidate& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

void spm_encode(const Vocabulary& vocab, std::string_view text, std::vector<TokenId>& out) {
  std::vector<SpmSymbol> symbols;
  symbols.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t n = std::min(text::utf8_sequence_length(uint8_t(text[pos])), text.size() - pos);
    const int index = int(symbols.size());
    symbols.push_back({index - 1, pos + n < text.size() ? index + 1 : -1, pos, n});
    pos += n;
  }
  if (symbols.empty()) return;

  std::priority_queue<SpmCandidate, std::vector<SpmCandidate>, ByScoreThenLeft> queue;
  auto consider = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const size_t size = symbols[size_t(left)].n + symbols[size_t(right)].n;
    const TokenId id = vocab.find(text.substr(symbols[size_t(left)].start, size));
    if (id < 0) return;
    queue.push({vocab.tokens[size_t(id)].score, left, right, size});
  };
  for (int i = 1; i < int(symbols.size()); ++i) consider(i - 1, i);

  while (!queue.empty()) {
    const SpmCandidate c = queue.top();
    queue.pop();
    SpmSymbol& left = symbols[size_t(c.left)];
    SpmSymbol& right = symbols[size_t(c.right)];
    if (left.n == 0 || right.n == 0 || left.n + right.n != c.size) continue;
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[size_t(right.next)].prev = c.left;
    consider(left.prev, c.left);
    consider(c.left, left.next);
  }

  for (int i = 0; i >= 0; i = symbols[size_t(i)].next) {
    const std::string_view piece = text.substr(symbols[size_t(i)].start, symbols[size_t(i)].n);
    if (const TokenId id = vocab.find(piece); id >= 0) {
      out.push_back(id);
      continue;
    }
    for (const char byte : piece) {
      const TokenId id = vocab.byte_token[uint8_t(byte)];
      if (id >= 0) out.push_back(id);
      else if (vocab.unk >= 0) out.push_back(vocab.unk);
    }
  }
}

}  // namespace shardlm::tok
