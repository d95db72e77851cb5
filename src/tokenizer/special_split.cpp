#include "tokenizer/special_split.h"

#include <algorithm>

namespace shardlm::tok {

SpecialSplitter::SpecialSplitter(const Vocabulary& vocab) : vocab_(vocab) {
  for (int order = 0; order < int(vocab.special_by_length.size()); ++order) {
    const TokenId id = vocab.special_by_length[size_t(order)];
    const std::string_view text = vocab.tokens[size_t(id)].text;
    by_text_.try_emplace(text, Entry{id, order});  // a repeated text is found by its first (longest-order) entry
    first_bytes_.set(uint8_t(text[0]));
    if (std::find(lengths_.begin(), lengths_.end(), text.size()) == lengths_.end()) lengths_.push_back(text.size());
  }
}

std::vector<Fragment> SpecialSplitter::split(std::string_view text, bool parse_special) const {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({-1, 0, text.size()});

  // Which special tokens occur anywhere, in the order llama.cpp tries them.
  std::vector<Entry> present;
  for (size_t pos = 0; pos < text.size(); ++pos) {
    if (!first_bytes_.test(uint8_t(text[pos]))) continue;
    for (const size_t len : lengths_) {
      if (len > text.size() - pos) continue;
      auto it = by_text_.find(text.substr(pos, len));
      if (it == by_text_.end()) continue;
      if (!parse_special && vocab_.has_attr(it->second.id, kAttrControl | kAttrUnknown)) continue;
      present.push_back(it->second);
    }
  }
  std::sort(present.begin(), present.end(), [](const Entry& a, const Entry& b) { return a.order < b.order; });
  present.erase(std::unique(present.begin(), present.end(), [](const Entry& a, const Entry& b) { return a.id == b.id; }),
                present.end());

  std::vector<Fragment> next;
  for (const Entry& special : present) {
    const std::string_view needle = vocab_.tokens[size_t(special.id)].text;
    next.clear();
    for (const Fragment& f : fragments) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t begin = f.begin;
      while (begin < f.end) {
        const size_t hit = text.substr(0, f.end).find(needle, begin);
        if (hit == std::string_view::npos) break;
        if (hit > begin) next.push_back({-1, begin, hit});
        next.push_back({special.id, hit, hit + needle.size()});
        begin = hit + needle.size();
      }
      if (begin < f.end) next.push_back({-1, begin, f.end});
    }
    fragments.swap(next);
  }
  return fragments;
}

}  // namespace shardlm::tok
